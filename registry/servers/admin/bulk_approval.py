"""What the tool list's "approve selected" will do, and did, in one line: "Approve 1 of 3 tools
(2 flagged, skipped)" on the confirmation, "Approved 1 of 3 tools (2 flagged, skipped)" after."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from registry.servers.models import ReviewStatus, Tool

# Why a selected tool is left out before anything is tried, in the order the summary names them.
FLAGGED = "flagged"
ALREADY_APPROVED = "already approved"
REMOVED = "no longer offered"
SERVER_CLOSED = "of a retired or rejected server"
CHANGED_MEANWHILE = "changed or decided meanwhile"
SKIP_ORDER = (FLAGGED, ALREADY_APPROVED, REMOVED, SERVER_CLOSED, CHANGED_MEANWHILE)


def skip_reason(tool: Tool) -> str | None:
    """Why bulk approval leaves this tool out, or None when it would approve it."""
    if tool.removed_at is not None:
        return REMOVED
    if tool.server.review_status in (ReviewStatus.RETIRED, ReviewStatus.REJECTED):
        return SERVER_CLOSED
    if tool.is_approved:
        return ALREADY_APPROVED
    if tool.findings:
        return FLAGGED
    return None


@dataclass
class BulkPlan:
    tools: list[Tool]
    approvable: list[Tool] = field(default_factory=list)
    skipped: list[tuple[Tool, str]] = field(default_factory=list)

    @classmethod
    def of(cls, tools: list[Tool]) -> BulkPlan:
        plan = cls(tools=tools)
        for tool in tools:
            reason = skip_reason(tool)
            if reason is None:
                plan.approvable.append(tool)
            else:
                plan.skipped.append((tool, reason))
        return plan

    def summary(self, verb: str = "Approve") -> str:
        return summary_line(verb, len(self.approvable), len(self.tools), self.skipped)


def summary_line(verb: str, done: int, total: int, skipped: list[tuple[Tool, str]]) -> str:
    """`Approve 1 of 3 tools (2 flagged, skipped)`; `Approved 2 of 2 tools`."""
    counts = Counter(reason for _, reason in skipped)
    noun = "tool" if total == 1 else "tools"
    line = f"{verb} {done} of {total} {noun}"
    parts = [f"{counts[reason]} {reason}" for reason in SKIP_ORDER if counts[reason]]
    if parts:
        line += f" ({', '.join(parts)}, skipped)"
    return line
