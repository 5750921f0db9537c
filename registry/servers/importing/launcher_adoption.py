"""Servers registered before launchers were understood: turn their `npx ...`, `uvx ...` or
`docker run ...` command into a pinned package or image reference, through the services.

`server_launcher_adopt` is what `manage.py adopt_launchers` runs for each server; it writes with
`services.server_update` (validated, audited; a reviewed server whose command changes goes back
to review, as any edit of its launch spec would) and records each pin in the audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from registry.audit.services import Actor, audit_record
from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.importing.launchers import (
    LauncherError,
    PackagePin,
    VersionLookup,
    launcher_adopt,
)
from registry.servers.importing.package_versions import PackageLookupError
from registry.servers.models import McpServer, ReviewStatus, Transport


@dataclass
class LauncherAdoptionResult:
    """What adopting did (or would do, on a dry run) to one server."""

    slug: str
    changes: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    sent_back_to_review: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.changes) and not self.error


def package_pin_record(*, actor: Actor, server: McpServer, pin: PackagePin) -> None:
    """The audit record of a package pinned because its launcher named no version."""
    audit_record(
        actor=actor,
        action="server.package_pinned",
        target=server,
        server=server,
        summary=f"{server.name}: {pin.describe()}",
        details=pin.as_details(),
    )


def servers_with_launcher_commands() -> list[McpServer]:
    """stdio servers that name neither a package nor an image: the candidates for adoption."""
    return list(
        McpServer.objects.filter(transport=Transport.STDIO, package_registry="", image="").order_by(
            "slug"
        )
    )


def server_launcher_adopt(
    *, actor: Actor, server: McpServer, dry_run: bool = False, lookup: VersionLookup | None = None
) -> LauncherAdoptionResult:
    """Store `server`'s launcher command as a pinned package or image reference.

    Nothing changes for a command that is no launcher or a server that already names a package
    or an image; a command that cannot be run as written is reported in `error`.
    """
    result = LauncherAdoptionResult(slug=server.slug)
    if server.transport != Transport.STDIO or server.package_registry or server.image:
        return result
    try:
        adoption = launcher_adopt(argv=list(server.command or []), env=server.env, lookup=lookup)
    except (LauncherError, PackageLookupError) as exc:
        result.error = str(exc)
        return result
    if adoption is None:
        return result
    env = adoption.fields.get("env")
    if env is not None:
        # docker's `-e NAME` without a value: keep what is stored, else store it empty.
        adoption.fields["env"] = {name: value or "" for name, value in env.items()}
    result.changes = {
        name: value for name, value in adoption.fields.items() if getattr(server, name) != value
    }
    result.warnings = list(adoption.warnings)
    if dry_run or not result.changes:
        return result
    try:
        with transaction.atomic():
            updated = services.server_update(actor=actor, server=server, changes=result.changes)
            if adoption.pin is not None:
                package_pin_record(actor=actor, server=updated, pin=adoption.pin)
    except ApplicationError as exc:
        result.error = exc.message
        return result
    result.sent_back_to_review = (
        server.review_status != updated.review_status
        and updated.review_status == ReviewStatus.PENDING_REVIEW
    )
    return result
