"""Reads of servers and tools for the admin, the commands and the API."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Case, Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, When

from registry.core.canonical import pretty_json
from registry.servers.models import (
    ApprovalEndReason,
    ApprovalState,
    McpServer,
    ReviewStatus,
    Tool,
    ToolApproval,
    ToolRevision,
)

# The servers whose tools wait for a decision: those in review or in use. A draft's tools wait for
# the server to be submitted first; a retired or rejected server's tools cannot be approved. The
# review queue, the fleet page and the server list's Awaiting column all count these alone.
AWAITING_SERVER_STATES = (ReviewStatus.PENDING_REVIEW, ReviewStatus.APPROVED)


class ToolCounts(TypedDict):
    """What `server_list_with_tool_counts` adds to each server."""

    tools_total: int
    tools_approved: int
    tools_awaiting: int | None


if TYPE_CHECKING:  # an alias for the type checker (the plugin reads the two arguments)
    from django_stubs_ext import WithAnnotations

    ServerWithToolCounts = WithAnnotations[McpServer, ToolCounts]


def server_list_with_tool_counts() -> QuerySet[ServerWithToolCounts]:
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
        # None for a server whose tools are not awaited (AWAITING_SERVER_STATES).
        tools_awaiting=Case(
            When(
                review_status__in=AWAITING_SERVER_STATES,
                then=F("tools_total") - F("tools_approved"),
            ),
            default=None,
            output_field=IntegerField(),
        ),
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


# --- where each tool stands in review ------------------------------------------------------------

TOOL_REVIEW_STATES: dict[str, str] = {
    "new": "New",
    "flagged": "Flagged",
    "changed": "Changed since approval",
    "revoked": "Revoked",
    "approved": "Approved",
    "removed": "Removed",
}
_REMOVED_HISTORY: dict[str, str] = {
    ApprovalEndReason.REMOVED: "was approved",
    ApprovalEndReason.DEFINITION_CHANGED: "was changed since approval",
    ApprovalEndReason.REVOKED: "its approval was revoked",
}


def tool_review_filter(state: str) -> Q:
    """The tools in one review state (a key of TOOL_REVIEW_STATES, or "awaiting" for every tool
    still offered and not approved). The states split the tools without overlap: a tool the
    scanner flagged is "flagged" whatever else it is, until it is approved."""
    live = Q(removed_at__isnull=True)
    approved = (
        live
        & Q(approval_state=ApprovalState.APPROVED)
        & Q(approved_definition_hash=F("definition_hash"))
    )
    awaiting = live & ~approved
    clean = Q(findings=[])
    filters = {
        "approved": approved,
        "awaiting": awaiting,
        "flagged": awaiting & ~clean,
        "changed": awaiting
        & clean
        & Q(approval_state__in=[ApprovalState.CHANGED, ApprovalState.APPROVED]),
        "new": awaiting & clean & Q(approval_state=ApprovalState.UNAPPROVED),
        "revoked": awaiting & clean & Q(approval_state=ApprovalState.REVOKED),
        "removed": Q(removed_at__isnull=False),
    }
    return filters[state]


def tools_with_review_history(queryset: QuerySet[Tool] | None = None) -> QuerySet[Tool]:
    """Tools with `last_approval_end_reason`: how their last approval ended (blank if active or
    never approved), which is what a removed tool's state says about its past."""
    last_approval = ToolApproval.objects.filter(tool=OuterRef("pk")).order_by("-approved_at", "-id")
    return (queryset if queryset is not None else Tool.objects.all()).annotate(
        last_approval_end_reason=Subquery(last_approval.values("end_reason")[:1])
    )


@dataclass(frozen=True)
class ToolReviewState:
    key: str  # a key of TOOL_REVIEW_STATES
    label: str


def tool_review_state(
    *, tool: Tool, last_approval_end_reason: str | None = None
) -> ToolReviewState:
    """Where a tool stands, in the words of the review: the same split as `tool_review_filter`.
    A removed tool says what it was before it went ("removed; was changed since approval")."""
    if tool.removed_at is not None:
        reason = last_approval_end_reason
        if reason is None and hasattr(tool, "last_approval_end_reason"):
            reason = tool.last_approval_end_reason
        elif reason is None:
            last = tool_last_approval(tool=tool)
            reason = last.end_reason if last is not None else ""
        history = _REMOVED_HISTORY.get(reason or "", "never approved")
        return ToolReviewState("removed", f"Removed; {history}")
    if tool.is_approved:
        return ToolReviewState("approved", "Approved")
    if tool.findings:
        if tool.approval_state in (ApprovalState.CHANGED, ApprovalState.APPROVED):
            return ToolReviewState("flagged", "Changed since approval, flagged by the scanner")
        return ToolReviewState("flagged", "Flagged by the scanner")
    if tool.approval_state in (ApprovalState.CHANGED, ApprovalState.APPROVED):
        return ToolReviewState("changed", "Changed since approval")
    if tool.approval_state == ApprovalState.REVOKED:
        return ToolReviewState("revoked", "Revoked")
    return ToolReviewState("new", "New, awaiting approval")
