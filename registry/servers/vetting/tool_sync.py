"""Syncing what a server offers with what is stored: tools (hashes, revisions, approvals
dropped on change), resources and prompts. Called by discovery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import (
    ApprovalEndReason,
    ApprovalState,
    ItemReview,
    McpServer,
    ServerPrompt,
    ServerResource,
    Tool,
    ToolApproval,
    ToolRevision,
)
from registry.servers.signals import (
    announce_tools_change,
    announce_visibility_change,
    tool_approvals_dropped,
)
from registry.servers.tool_definitions import ToolDefinition, derive_permission_class


class ToolListError(ApplicationError):
    """What a server listed cannot be stored as tools (no name, not an object...)."""


@dataclass
class ToolSyncResult:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    unchanged: int = 0
    approvals_dropped: list[str] = field(default_factory=list)


def _check_tool_definitions(definitions: list[dict[str, Any]]) -> list[ToolDefinition]:
    tools: list[ToolDefinition] = []
    seen: set[str] = set()
    for index, definition in enumerate(definitions):
        if not isinstance(definition, dict):
            raise ToolListError(f"Tool #{index + 1} is not an object.")
        name = definition.get("name")
        if not isinstance(name, str) or not name:
            raise ToolListError(f"Tool #{index + 1} has no name.")
        if len(name) > 200:
            raise ToolListError(f"Tool #{index + 1} has a name longer than 200 characters.")
        if name in seen:
            raise ToolListError(f"The server lists the tool {name!r} twice.")
        seen.add(name)
        tools.append(ToolDefinition(definition))
    return tools


@transaction.atomic
def server_tools_sync(
    *,
    server: McpServer,
    tools: list[dict[str, Any]],
    resources: list[dict[str, Any]] | None = None,
    prompts: list[dict[str, Any]] | None = None,
    findings: Mapping[str, list[dict[str, Any]]] | None = None,
    actor: Actor = "worker:discovery",
) -> ToolSyncResult:
    """Make the stored tools match what the server just listed.

    New tools start unapproved. A tool whose definition hash changed loses its approval at once
    (the revision is kept for the diff, and the change is audited). Tools the server stopped
    listing are marked removed. Resources and prompts are replaced by what was listed, each keeping
    its review unless its definition changed (then it awaits approval again).
    """
    definitions = _check_tool_definitions(tools)
    findings = findings or {}
    now = timezone.now()
    by = actor_label(actor)
    result = ToolSyncResult()
    existing = {tool.name: tool for tool in Tool.objects.select_for_update().filter(server=server)}
    listed = {d.name for d in definitions}

    to_create: list[Tool] = []
    to_update: list[Tool] = []
    new_revisions: list[ToolRevision] = []
    changed_tools: list[tuple[Tool, str, str]] = []
    for definition in definitions:
        digest = definition.hash
        tool_findings = list(findings.get(definition.name, []))
        tool = existing.get(definition.name)
        if tool is None:
            tool = Tool(
                server=server,
                name=definition.name,
                first_seen_at=now,
                last_seen_at=now,
            )
            _apply_definition(tool, definition, digest, tool_findings, trust_tier=server.trust_tier)
            to_create.append(tool)
            result.added.append(definition.name)
            continue
        tool.last_seen_at = now
        dirty = False
        if tool.removed_at is not None:
            tool.removed_at = None
            result.returned.append(tool.name)
            dirty = True
        if tool.definition_hash != digest:
            old_hash = tool.definition_hash
            _apply_definition(tool, definition, digest, tool_findings, trust_tier=server.trust_tier)
            if tool.approval_state == ApprovalState.APPROVED:
                tool.approval_state = ApprovalState.CHANGED
                result.approvals_dropped.append(tool.name)
            tool.approved_definition_hash = ""
            changed_tools.append((tool, old_hash, digest))
            new_revisions.append(
                ToolRevision(
                    tool=tool,
                    definition_hash=digest,
                    definition=definition.definition,
                    first_seen_at=now,
                    last_seen_at=now,
                )
            )
            result.changed.append(tool.name)
            dirty = True
        elif tool.findings != tool_findings:
            tool.findings = tool_findings
            dirty = True
        if dirty:
            to_update.append(tool)
        else:
            result.unchanged += 1

    removed = [
        tool for name, tool in existing.items() if name not in listed and tool.removed_at is None
    ]
    for tool in removed:
        tool.removed_at = now
        if tool.approval_state == ApprovalState.APPROVED:
            result.approvals_dropped.append(tool.name)
        tool.approval_state = ApprovalState.UNAPPROVED
        tool.approved_definition_hash = ""
        result.removed.append(tool.name)
    for tool in to_update + removed:
        tool.permission_class = tool.permission_class_override or tool.permission_class_derived

    if to_create:
        for tool in to_create:
            tool.permission_class = tool.permission_class_override or tool.permission_class_derived
        Tool.objects.bulk_create(to_create, batch_size=500)
        new_revisions.extend(
            ToolRevision(
                tool=tool,
                definition_hash=tool.definition_hash,
                definition=tool.definition,
                first_seen_at=now,
                last_seen_at=now,
            )
            for tool in to_create
        )
    if to_update or removed:
        Tool.objects.bulk_update(
            to_update + removed,
            [
                "title",
                "description",
                "input_schema",
                "output_schema",
                "annotations",
                "definition",
                "definition_hash",
                "permission_class_derived",
                "permission_class",
                "approval_state",
                "approved_definition_hash",
                "findings",
                "removed_at",
                "last_seen_at",
            ],
            batch_size=500,
        )
    # Every tool still listed was seen now, changed or not.
    Tool.objects.filter(server=server, removed_at__isnull=True).update(last_seen_at=now)
    if new_revisions:
        ToolRevision.objects.bulk_create(new_revisions, batch_size=500, ignore_conflicts=True)
    ToolRevision.objects.filter(
        tool__server=server,
        tool__removed_at__isnull=True,
        definition_hash__in=[d.hash for d in definitions if d.name not in result.added],
    ).update(last_seen_at=now)

    dropped = set(result.approvals_dropped)
    for reason, ended in (
        (ApprovalEndReason.DEFINITION_CHANGED, [t for t, _, _ in changed_tools]),
        (ApprovalEndReason.REMOVED, removed),
    ):
        if ended:
            ToolApproval.objects.filter(
                tool__in=[t.pk for t in ended], ended_at__isnull=True
            ).update(ended_at=now, ended_by_label=by, end_reason=reason)

    rug_pulls = [change for change in changed_tools if change[0].name in dropped]
    if rug_pulls:
        tool_approvals_dropped.send(sender=None, server=server, changes=rug_pulls)
    for tool, old_hash, new_hash in changed_tools:
        was_approved = tool.name in dropped
        audit_record(
            actor=actor,
            action="tool.definition_changed",
            target=tool,
            server=server,
            summary=f"{server.name} changed the definition of {tool.name}"
            + (
                ": its approval was dropped until an admin approves the new definition."
                if was_approved
                else "."
            ),
            before={"definition_hash": old_hash},
            after={"definition_hash": new_hash},
            details={"approval_dropped": was_approved},
        )
    for tool in removed:
        audit_record(
            actor=actor,
            action="tool.removed",
            target=tool,
            server=server,
            summary=f"{server.name} no longer offers {tool.name}.",
            details={"approval_dropped": tool.name in dropped},
        )

    items_changed = False
    if resources is not None:
        items_changed = _sync_resources(server, resources, actor)
    if prompts is not None:
        items_changed = _sync_prompts(server, prompts, actor) or items_changed
    if items_changed:  # the gateway's resources and prompts lists are rebuilt
        announce_visibility_change(server_ids=[server.pk], reason="server.items_synced")

    if result.added or result.changed or result.removed or result.returned:
        announce_tools_change(server_ids=[server.pk])
        announce_visibility_change(server_ids=[server.pk], reason="server.tools_synced")
        audit_record(
            actor=actor,
            action="server.tools_synced",
            target=server,
            server=server,
            summary=f"Discovered {len(definitions)} tools on {server.name}: "
            f"{len(result.added)} new, {len(result.changed)} changed, "
            f"{len(result.removed)} removed, {len(result.returned)} back.",
            details={
                "added": result.added[:200],
                "changed": result.changed[:200],
                "removed": result.removed[:200],
                "returned": result.returned[:200],
                "approvals_dropped": result.approvals_dropped[:200],
            },
        )
    return result


def _apply_definition(
    tool: Tool,
    definition: ToolDefinition,
    digest: str,
    findings: list[dict[str, Any]],
    *,
    trust_tier: str,
) -> None:
    tool.title = definition.title[:300]
    tool.description = definition.description
    tool.input_schema = definition.input_schema
    tool.output_schema = definition.output_schema
    tool.annotations = definition.annotations
    tool.definition = definition.definition
    tool.definition_hash = digest
    tool.permission_class_derived = derive_permission_class(
        definition.annotations, trust_tier=trust_tier
    )
    tool.findings = findings


_ITEM_REVIEW_FIELDS = [
    "definition_hash",
    "review_state",
    "approved_definition_hash",
    "reviewed_by_label",
    "reviewed_at",
]


def _sync_items(
    server: McpServer,
    model: type[ServerResource] | type[ServerPrompt],
    *,
    key: str,
    rows: dict[str, Any],
    content_fields: list[str],
    actor: Actor,
) -> bool:
    """Replace the server's resources (or prompts) with `rows`, keyed by `key`, keeping each one's
    review: a new item awaits approval; an approved item whose definition hash changed goes back
    to awaiting approval (audited); a hidden one stays hidden. True if what clients could see may
    have changed (an item added, removed or changed)."""
    existing = {getattr(item, key): item for item in model.objects.filter(server=server)}
    kind = model._meta.model_name.removeprefix("server") if model._meta.model_name else "item"
    changed = set(existing) != set(rows)
    dropped: list[tuple[Any, str]] = []
    for name, row in rows.items():
        row.refresh_definition_hash()
        old = existing.get(name)
        if old is None:
            continue
        changed = changed or old.definition_hash != row.definition_hash
        for field_name in ("review_state", "approved_definition_hash", "reviewed_by_label"):
            setattr(row, field_name, getattr(old, field_name))
        row.reviewed_at = old.reviewed_at
        if old.review_state == ItemReview.APPROVED and not row.is_approved:
            row.review_state = ItemReview.PENDING
            dropped.append((row, old.approved_definition_hash))
    model.objects.filter(server=server).exclude(**{f"{key}__in": list(rows)}).delete()
    model.objects.bulk_create(
        rows.values(),
        update_conflicts=True,
        unique_fields=["server", key],
        update_fields=content_fields + _ITEM_REVIEW_FIELDS,
        batch_size=500,
    )
    ids = {getattr(item, key): item.pk for item in model.objects.filter(server=server)}
    for row, old_hash in dropped:
        row.pk = ids.get(getattr(row, key))  # bulk_create sets it on PostgreSQL only
        audit_record(
            actor=actor,
            action=f"{kind}.definition_changed",
            target=row,
            server=server,
            summary=f"{server.name} changed the definition of the {kind} {row}: its approval "
            "was dropped until an admin approves the new definition.",
            before={"definition_hash": old_hash},
            after={"definition_hash": row.definition_hash},
            details={"approval_dropped": True},
        )
    return changed


def _sync_resources(server: McpServer, resources: list[dict[str, Any]], actor: Actor) -> bool:
    rows = {}
    for item in resources:
        uri = str(item.get("uri") or item.get("uriTemplate") or "")[:1000]
        if not uri:
            continue
        rows[uri] = ServerResource(
            server=server,
            uri=uri,
            name=str(item.get("name") or "")[:300],
            title=str(item.get("title") or "")[:300],
            description=str(item.get("description") or ""),
            mime_type=str(item.get("mimeType") or "")[:200],
            is_template="uriTemplate" in item,
        )
    fields = ["name", "title", "description", "mime_type", "is_template"]
    return _sync_items(
        server, ServerResource, key="uri", rows=rows, content_fields=fields, actor=actor
    )


def _sync_prompts(server: McpServer, prompts: list[dict[str, Any]], actor: Actor) -> bool:
    rows = {}
    for item in prompts:
        name = str(item.get("name") or "")[:300]
        if not name:
            continue
        rows[name] = ServerPrompt(
            server=server,
            name=name,
            title=str(item.get("title") or "")[:300],
            description=str(item.get("description") or ""),
            arguments=list(item.get("arguments") or []),
        )
    fields = ["title", "description", "arguments"]
    return _sync_items(
        server, ServerPrompt, key="name", rows=rows, content_fields=fields, actor=actor
    )
