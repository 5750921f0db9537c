"""The review queue: the admin's landing page, counting the work that waits for someone.

Every count comes with the admin list URL that shows exactly the rows counted (the same filters,
from the same selectors), so a number is never a promise the list does not keep. The queue lives
in the teams app because it spans servers, tools and access requests, and teams sits above
servers in the import order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.urls import reverse

from registry.servers.models import Health, McpServer, ReviewStatus, ServerStatus, Tool
from registry.servers.selectors import AWAITING_SERVER_STATES, tool_review_filter
from registry.teams.models import AccessRequest, AccessRequestState

# The tools that wait for a decision: those of servers in review or in use (the fleet page and the
# server list's Awaiting column count the same).
QUEUE_SERVER_STATES = AWAITING_SERVER_STATES
CHANGED_TOOLS_LISTED = 10


@dataclass(frozen=True)
class QueueRow:
    key: str
    label: str
    count: int
    url: str


@dataclass
class QueueSection:
    title: str
    rows: list[QueueRow] = field(default_factory=list)


@dataclass
class ReviewQueue:
    sections: list[QueueSection]
    changed_tools: list[Tool]

    @property
    def total(self) -> int:
        return sum(row.count for section in self.sections for row in section.rows)


def _url(name: str, **params: str) -> str:
    return f"{reverse(name)}?{urlencode(params)}" if params else reverse(name)


def queue_tools(state: str) -> QuerySet[Tool]:
    """The tools the queue counts in a review state (see registry.servers.selectors)."""
    return Tool.objects.filter(
        tool_review_filter(state), server__review_status__in=QUEUE_SERVER_STATES
    )


def review_queue(*, user: User | AnonymousUser) -> ReviewQueue:
    """What waits for `user`, as far as they may see it."""
    sections: list[QueueSection] = []
    if user.has_perm("servers.view_mcpserver"):
        servers = QueueSection("Servers")
        servers.rows.append(
            QueueRow(
                "servers_pending",
                "Waiting for review",
                McpServer.objects.filter(review_status=ReviewStatus.PENDING_REVIEW).count(),
                _url(
                    "admin:servers_mcpserver_changelist",
                    review_status__exact=ReviewStatus.PENDING_REVIEW,
                ),
            )
        )
        for health in (Health.UNHEALTHY, Health.DEGRADED):
            servers.rows.append(
                QueueRow(
                    f"servers_{health}",
                    Health(health).label,
                    McpServer.objects.filter(status__health=health).count(),
                    _url("admin:servers_mcpserver_changelist", health=health),
                )
            )
        servers.rows.append(
            QueueRow(
                "servers_discovery_failed",
                "Last discovery failed",
                ServerStatus.objects.exclude(last_discovery_error="").count(),
                _url("admin:servers_mcpserver_changelist", discovery="failed"),
            )
        )
        sections.append(servers)
    if user.has_perm("servers.view_tool"):
        tools = QueueSection("Tools of servers in review or in use")
        states = QUEUE_SERVER_STATES
        for state, label in (
            ("new", "New"),
            ("changed", "Changed since approval"),
            ("flagged", "Flagged by the scanner"),
        ):
            tools.rows.append(
                QueueRow(
                    f"tools_{state}",
                    label,
                    queue_tools(state).count(),
                    _url(
                        "admin:servers_tool_changelist",
                        review=state,
                        server__review_status__in=",".join(states),
                    ),
                )
            )
        sections.append(tools)
    if user.has_perm("teams.view_accessrequest"):
        sections.append(
            QueueSection(
                "Access",
                [
                    QueueRow(
                        "access_pending",
                        "Access requests waiting",
                        AccessRequest.objects.filter(state=AccessRequestState.PENDING).count(),
                        _url("admin:teams_accessrequest_changelist", state__exact="pending"),
                    )
                ],
            )
        )
    changed: list[Tool] = []
    if user.has_perm("servers.view_tool"):
        changed = list(
            queue_tools("awaiting")
            .filter(tool_review_filter("changed") | tool_review_filter("flagged"))
            .exclude(approval_state="unapproved")
            .select_related("server")
            .order_by("-last_seen_at")[:CHANGED_TOOLS_LISTED]
        )
    return ReviewQueue(sections=sections, changed_tools=changed)
