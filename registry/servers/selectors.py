"""Reads of servers and tools for the admin, the commands and the API."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from django.db.models import Count, F, Q, QuerySet

from registry.core.canonical import pretty_json
from registry.servers.models import ApprovalState, McpServer, Tool, ToolApproval, ToolRevision


def server_list_with_tool_counts() -> QuerySet[McpServer]:
    """Servers with their category, status and tool counts in one query."""
    live = Q(tools__removed_at__isnull=True)
    approved = (
        live
        & Q(tools__approval_state=ApprovalState.APPROVED)
        & Q(tools__approved_definition_hash=F("tools__definition_hash"))
    )
    return McpServer.objects.select_related("category", "status").annotate(
        tools_total=Count("tools", filter=live),
        tools_approved=Count("tools", filter=approved),
        tools_awaiting=F("tools_total") - F("tools_approved"),
    )


def approved_tools() -> QuerySet[Tool]:
    """Tools whose current definition carries an active approval."""
    return Tool.objects.filter(
        removed_at__isnull=True,
        approval_state=ApprovalState.APPROVED,
        approved_definition_hash=F("definition_hash"),
    )


@dataclass(frozen=True)
class DefinitionDiff:
    approved_hash: str
    current_hash: str
    approved_at: str
    lines: list[tuple[str, str]]  # (kind, text) with kind in "context", "added", "removed", "hunk"

    @property
    def has_changes(self) -> bool:
        return any(kind in ("added", "removed") for kind, _ in self.lines)


def tool_last_approval(*, tool: Tool) -> ToolApproval | None:
    return ToolApproval.objects.filter(tool=tool).order_by("-approved_at", "-id").first()


def tool_definition_diff(*, tool: Tool) -> DefinitionDiff | None:
    """The difference between the last approved definition and the current one, if they differ."""
    approval = tool_last_approval(tool=tool)
    if approval is None or approval.definition_hash == tool.definition_hash:
        return None
    revision = ToolRevision.objects.filter(
        tool=tool, definition_hash=approval.definition_hash
    ).first()
    if revision is None:
        return None
    old = pretty_json(revision.definition).splitlines()
    new = pretty_json(tool.definition).splitlines()
    lines: list[tuple[str, str]] = []
    for line in difflib.unified_diff(old, new, "approved", "current", lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            lines.append(("hunk", line))
        elif line.startswith("+"):
            lines.append(("added", line[1:]))
        elif line.startswith("-"):
            lines.append(("removed", line[1:]))
        else:
            lines.append(("context", line[1:]))
    return DefinitionDiff(
        approved_hash=approval.definition_hash,
        current_hash=tool.definition_hash,
        approved_at=approval.approved_at.isoformat(),
        lines=lines,
    )
