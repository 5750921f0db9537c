"""`manage.py load_demo`: import the demo servers and categories; safe to run on every start."""

from __future__ import annotations

import dataclasses
import io
import sys
import tarfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from registry.servers import services
from registry.servers.importing import (
    ImportAction,
    ImportFileError,
    ImportOptions,
    ImportResult,
    import_apply,
    import_plan,
)
from registry.servers.importing.report import problem_lines
from registry.servers.models import (
    ApprovalState,
    ItemReview,
    McpServer,
    PermissionClass,
    ReviewStatus,
    Tool,
)
from registry.servers.services.storage import storage_seed_set

DEMO_FILE = Path(__file__).resolve().parents[2] / "demo" / "servers.yaml"
# The files the Filesystem demo server's volumes start with (storage at /data).
FILESYSTEM_SEED = DEMO_FILE.parent / "filesystem_seed"
ACTOR = "system:demo"
# The demo's review states: what an admin would have decided for these servers.
APPROVED = ("time", "git")
PENDING_REVIEW = ("fetch",)
APPROVAL_NOTE = (
    "Demo data: installed with Toolroom from PyPI and run from its own virtual environment."
)


class Command(BaseCommand):
    help = (
        "Load the demo categories and MCP servers (time, git, fetch, filesystem, memory, "
        "everything). Creates what is missing and leaves existing servers as an admin left "
        "them, so it is safe to run on every start; --reset restores the demo definitions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Also update existing demo servers and categories to the demo definitions.",
        )
        parser.add_argument(
            "--approve-read-tools",
            action="store_true",
            help="Only approve, as the demo's reviewer, the discovered read-only tools of the "
            "approved demo servers that the scanner did not flag, and their resources and prompts "
            "(make run does this after "
            "discovering them), so the demo agent's catalogue is not empty.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["approve_read_tools"]:
            approved = _approve_read_tools()
            self.stdout.write(
                f"Approved as the demo's reviewer: {', '.join(approved)}."
                if approved
                else "No demo tools waiting for approval."
            )
            return
        # The demo file reads these two variables and nothing of the process environment.
        environ = {
            "TOOLROOM_PYTHON": sys.executable,
            "TOOLROOM_PROJECT_DIR": str(settings.BASE_DIR),
        }
        try:
            with transaction.atomic():
                plan = import_plan(
                    content=DEMO_FILE.read_bytes(),
                    filename=DEMO_FILE.name,
                    options=ImportOptions(format="yaml", environ=environ),
                )
                if not options["reset"]:
                    plan = dataclasses.replace(
                        plan,
                        entries=[e for e in plan.entries if e.action == ImportAction.CREATE],
                        categories=[c for c in plan.categories if c.action == ImportAction.CREATE],
                    )
                result = import_apply(plan=plan, actor=ACTOR)
                reviewed = _review(result)
                _seed_filesystem(result)
        except ImportFileError as exc:
            self.stderr.write("\n".join(problem_lines(exc)))
            raise CommandError("The demo data was not loaded.") from exc
        if not (result.created or result.updated or result.categories_created):
            self.stdout.write("Demo data is already loaded.")
            return
        self.stdout.write(self.style.SUCCESS(f"Demo data: {result.summary()}"))
        if reviewed:
            self.stdout.write(f"Approved as the demo's reviewer: {', '.join(reviewed)}.")


def _seed_filesystem(result: ImportResult) -> None:
    """Pre-fill the Filesystem demo server's volumes with the demo files (once)."""
    server = McpServer.objects.filter(slug="filesystem").first()
    if server is None or "filesystem" not in result.created or server.storage_seeds.exists():
        return
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for path in sorted(FILESYSTEM_SEED.rglob("*.txt")):
            tar.add(path, arcname=str(path.relative_to(FILESYSTEM_SEED)))
    storage_seed_set(
        actor=ACTOR,
        server=server,
        path="/data",
        filename="filesystem-demo-files.tar",
        content=archive.getvalue(),
    )


def _approve_read_tools() -> list[str]:
    """Read-only tools without findings of the approved demo servers, and their resources and
    prompts, at their current hashes."""
    tools = Tool.objects.filter(
        server__slug__in=APPROVED,
        server__review_status=ReviewStatus.APPROVED,
        removed_at__isnull=True,
        permission_class=PermissionClass.READ,
        findings=[],
    ).select_related("server")
    approved = []
    for tool in tools:
        if tool.is_approved or tool.approval_state != ApprovalState.UNAPPROVED:
            continue  # approved already, or an admin's decision (revoked, changed) stands
        services.tool_approve(actor=ACTOR, tool=tool, note="Demo data: a read-only tool.")
        approved.append(str(tool))
    # Their resources and prompts (read-class) too, those never reviewed: a hidden one, or one
    # changed since its approval, is an admin's decision to make.
    for model in services.ITEM_MODELS.values():
        items = model.objects.filter(
            server__slug__in=APPROVED,
            server__review_status=ReviewStatus.APPROVED,
            review_state=ItemReview.PENDING,
            approved_definition_hash="",
        ).select_related("server")
        for item in items:
            services.item_approve(actor=ACTOR, item=item, note="Demo data: read-only content.")
            approved.append(f"{item.server.slug}/{item}")
    return approved


def _review(result: ImportResult) -> list[str]:
    """Give servers this run created (or sent back to review) the demo's review state; leave
    every decision an admin made alone."""
    touched = set(result.created) | set(result.sent_back_to_review)
    approved = []
    for slug in APPROVED:
        if slug not in touched:
            continue
        server = McpServer.objects.get(slug=slug)
        if server.review_status == ReviewStatus.DRAFT:
            server = services.server_submit_for_review(actor=ACTOR, server=server)
        if server.review_status == ReviewStatus.PENDING_REVIEW:
            services.server_approve(actor=ACTOR, server=server, note=APPROVAL_NOTE)
            approved.append(slug)
    for slug in PENDING_REVIEW:
        if slug in result.created:
            services.server_submit_for_review(actor=ACTOR, server=McpServer.objects.get(slug=slug))
    return approved
