"""Applying an import plan: one transaction, every server written through the services.

Servers are created with `services.server_create` and updated with `services.server_update`, so
each change is validated again and audited like an edit in the admin (and an approved server
whose launch spec loosens goes back to review). Any failure rolls the whole import back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from registry.audit.services import Actor
from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.importing.entries import ImportFileError, ImportProblem
from registry.servers.importing.launcher_adoption import package_pin_record
from registry.servers.importing.planning import (
    CategoryPlan,
    EntryPlan,
    ImportAction,
    ImportPlan,
)
from registry.servers.importing.upstream_client import upstream_client_announce
from registry.servers.models import Category, McpServer, ReviewStatus


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    sent_back_to_review: list[str] = field(default_factory=list)
    categories_created: list[str] = field(default_factory=list)
    categories_updated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"Imported: {len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged."
        )
        if self.categories_created or self.categories_updated:
            text += (
                f" Categories: {len(self.categories_created)} created, "
                f"{len(self.categories_updated)} updated."
            )
        if self.sent_back_to_review:
            text += f" Back to review: {', '.join(self.sent_back_to_review)}."
        return text


def import_apply(*, plan: ImportPlan, actor: Actor) -> ImportResult:
    """Write what `plan` says, all or nothing. Raises ImportFileError (nothing written) when a
    service refuses an entry or the registry changed since the plan was made."""
    if plan.options.dry_run:
        raise ValueError("A dry-run plan is for reading; plan again without dry_run to apply.")
    with transaction.atomic():
        result = ImportResult()
        categories = _apply_categories(plan.categories, actor, result)
        for entry in plan.entries:
            try:
                _apply_entry(entry, actor, categories, result)
            except ApplicationError as exc:
                if isinstance(exc, ImportFileError):
                    raise
                raise ImportFileError([ImportProblem(entry.label, exc.field, exc.message)]) from exc
        return result


def _apply_categories(
    plans: list[CategoryPlan], actor: Actor, result: ImportResult
) -> dict[str, Category]:
    for plan in plans:
        if plan.action == ImportAction.CREATE:
            services.category_create(
                actor=actor, slug=plan.slug, name=plan.name, description=plan.description
            )
            result.categories_created.append(plan.slug)
        elif plan.action == ImportAction.UPDATE:
            category = Category.objects.select_for_update().get(slug=plan.slug)
            services.category_update(
                actor=actor, category=category, name=plan.name, description=plan.description
            )
            result.categories_updated.append(plan.slug)
    return {category.slug: category for category in Category.objects.all()}


def _stale(entry: EntryPlan, why: str) -> ImportFileError:
    return ImportFileError(
        [
            ImportProblem(
                entry.label, None, f"{why} since the import was checked; check the file again."
            )
        ]
    )


def _apply_entry(
    entry: EntryPlan, actor: Actor, categories: dict[str, Category], result: ImportResult
) -> None:
    fields: dict[str, Any] = dict(entry.values)
    if entry.category_set:
        category = categories.get(entry.category) if entry.category else None
        if entry.category and category is None:
            raise _stale(entry, f"The category {entry.category!r} was deleted")
        fields["category"] = category
    if entry.action == ImportAction.CREATE:
        if McpServer.objects.filter(slug=entry.slug).exists():
            raise _stale(entry, f"A server with the slug {entry.slug!r} was added")
        created = services.server_create(actor=actor, **fields)
        _record_pins(entry, created, actor)
        if entry.upstream_client is not None:
            upstream_client_announce(server=created, client=entry.upstream_client, actor=actor)
        result.created.append(entry.slug)
        return
    server = (
        McpServer.objects.select_for_update().filter(pk=entry.server_id).first()
        if entry.server_id is not None
        else None
    )
    if server is None or server.slug != entry.slug:
        raise _stale(entry, f"The server {entry.slug!r} was deleted or renamed")
    if server.updated_at != entry.server_updated_at:
        raise _stale(entry, f"The server {entry.slug!r} was changed")
    if entry.action == ImportAction.UNCHANGED:
        result.unchanged.append(entry.slug)
        return
    changes = {name: fields[name] for name in entry.changed_fields}
    # Only the upstream OAuth client may change: the server itself is then left as it is.
    updated = (
        services.server_update(actor=actor, server=server, changes=changes) if changes else server
    )
    if "package_version" in changes:
        _record_pins(entry, updated, actor)
    if entry.upstream_client is not None:
        upstream_client_announce(server=updated, client=entry.upstream_client, actor=actor)
    result.updated.append(entry.slug)
    if (
        server.review_status != updated.review_status
        and updated.review_status == ReviewStatus.PENDING_REVIEW
    ):
        result.sent_back_to_review.append(entry.slug)


def _record_pins(entry: EntryPlan, server: McpServer, actor: Actor) -> None:
    """An audit record for each package the file left unpinned: which version, from where."""
    for pin in entry.pins:
        package_pin_record(actor=actor, server=server, pin=pin)


# --- Categories (no service of their own yet: created here, validated and audited) ----------
