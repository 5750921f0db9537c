"""The portal's reads, built on the same selectors as the API and the catalogue: what a person's
teams may use now (`catalogue_for_agent` per role), the approved offer (`requestable_servers`)
marked with what the team already has, grants that end soon, requests, tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet
from django.utils import timezone

from registry.catalogue.selectors import (
    Catalogue,
    Preflight,
    catalogue_for_agent,
    catalogue_preflight,
)
from registry.servers.models import ApprovalState, McpServer, ReviewStatus, Tool
from registry.teams.models import (
    AccessRequest,
    AgentToken,
    Grant,
    Membership,
    Team,
    TeamAction,
    teams_for_user,
)
from registry.teams.selectors import agent_tokens_with_last_use, requestable_servers
from registry.upstream.models import UpstreamAccount

EXPIRING_SOON = timedelta(days=14)


@dataclass(frozen=True)
class TeamNotices:
    """What the team holds a grant on but cannot use now, and why (the portal's notice; the
    owners are e-mailed too, registry/notifications/changes.py)."""

    changed_tools: list[Tool]  # changed upstream, waiting for review
    unavailable_servers: list[McpServer]  # suspended or retired

    def __bool__(self) -> bool:
        return bool(self.changed_tools or self.unavailable_servers)


@dataclass(frozen=True)
class TeamOverview:
    team: Team
    level: str  # the person's membership level
    catalogues: list[Catalogue]  # one per role: what the team's agents of that role see now
    expiring: list[Grant]
    notices: TeamNotices
    # The person's upstream accounts' states by server slug (per-person tools' "needs your
    # account" mark).
    accounts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VettingSummary:
    reviewed_at: datetime | None
    reviewed_by: str
    scanner: str  # the description scanner's verdict, in words


@dataclass
class BrowseServer:
    server: McpServer
    tools: list[Tool]
    vetting: VettingSummary
    has_server: bool = False  # the team has a grant on the whole server
    tool_ids_granted: set[int] = field(default_factory=set)
    # With a search that matched tools and not the server itself: the tools that matched, shown
    # first; the others are folded away.
    matched_tools: list[Tool] | None = None

    @property
    def other_tools(self) -> list[Tool]:
        if self.matched_tools is None:
            return []
        return [tool for tool in self.tools if tool not in self.matched_tools]


def portal_teams(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Team]:
    """The person's teams (guardian's view permission), with their roles."""
    return teams_for_user(user, TeamAction.VIEW).prefetch_related("roles").order_by("name")


def portal_team(*, user: AbstractBaseUser | AnonymousUser, slug: str) -> Team | None:
    """One of the person's teams, or None: another team's slug is refused like an unknown one."""
    return portal_teams(user=user).filter(slug=slug).first()


def portal_is_owner(*, user: AbstractBaseUser | AnonymousUser, team: Team) -> bool:
    return teams_for_user(user, TeamAction.MANAGE).filter(pk=team.pk).exists()


def grants_expiring_soon(*, team: Team, within: timedelta = EXPIRING_SOON) -> list[Grant]:
    now = timezone.now()
    return list(
        Grant.objects.active(now)
        .filter(team=team, expires_at__lte=now + within)
        .select_related("server", "tool", "role")
        .order_by("expires_at")
    )


def team_notices(*, team: Team) -> TeamNotices:
    """Tools the team held (a grant on the whole server or on the tool) whose definition changed
    upstream since their approval, and servers it holds that were suspended or retired: two
    queries."""
    grants = Grant.objects.active().filter(team=team)
    changed = (
        Tool.objects.filter(
            approval_state=ApprovalState.CHANGED,
            removed_at__isnull=True,
            server__review_status=ReviewStatus.APPROVED,
        )
        .filter(
            Q(server_id__in=grants.filter(tool__isnull=True).values("server_id"))
            | Q(pk__in=grants.filter(tool__isnull=False).values("tool_id"))
        )
        .select_related("server")
        .order_by("server__slug", "name")
    )
    unavailable = McpServer.objects.filter(
        pk__in=grants.values("server_id"),
        review_status__in=[ReviewStatus.SUSPENDED, ReviewStatus.RETIRED],
    ).order_by("slug")
    return TeamNotices(changed_tools=list(changed), unavailable_servers=list(unavailable))


def team_overview(*, user: AbstractBaseUser, team: Team) -> TeamOverview:
    membership = Membership.objects.filter(team=team, user_id=user.pk).first()
    return TeamOverview(
        team=team,
        level=membership.level if membership else "",
        catalogues=[
            catalogue_for_agent(team_id=team.pk, role_id=role.pk) for role in team.roles.all()
        ],
        expiring=grants_expiring_soon(team=team),
        notices=team_notices(team=team),
        accounts=dict(
            UpstreamAccount.objects.filter(person_id=user.pk).values_list("server__slug", "state")
        ),
    )


def _scanner_verdict(server: McpServer, tools: list[Tool]) -> str:
    status = getattr(server, "status", None)
    report: dict[str, Any] = (status.vetting_report if status else None) or {}
    flagged = [tool for tool in tools if tool.findings]
    if not report and not flagged:
        return "not scanned yet"
    if not flagged:
        return "no findings"
    pending = sum(1 for tool in flagged if not tool.is_approved)
    return f"{len(flagged)} tool(s) flagged by the scanner; " + (
        f"{pending} of them not approved" if pending else "approved after review"
    )


def browse_servers(*, team: Team | None, search: str = "") -> list[BrowseServer]:
    """The approved offer (the API's `requestable_servers`), searched by server or tool name or
    description, each marked with what `team` already has through an active grant."""
    servers = requestable_servers().select_related("reviewed_by")
    search = search.strip()
    if search:
        servers = servers.filter(
            Q(name__icontains=search)
            | Q(slug__icontains=search)
            | Q(description__icontains=search)
            | Q(category__name__icontains=search)
            | Q(tools__name__icontains=search, tools__removed_at__isnull=True)
            | Q(tools__description__icontains=search, tools__removed_at__isnull=True)
        ).distinct()
    granted_servers: set[int] = set()
    granted_tools: set[int] = set()
    if team is not None:
        for server_id, tool_id in (
            Grant.objects.active().filter(team=team).values_list("server_id", "tool_id")
        ):
            if tool_id is None:
                granted_servers.add(server_id)
            else:
                granted_tools.add(tool_id)
    rows: list[BrowseServer] = []
    for server in servers:
        tools: list[Tool] = list(getattr(server, "live_tools", []))
        reviewer = server.reviewed_by.get_username() if server.reviewed_by else ""
        matched = _matched_tools(server, tools, search) if search else None
        rows.append(
            BrowseServer(
                server=server,
                tools=tools,
                vetting=VettingSummary(
                    reviewed_at=server.reviewed_at,
                    reviewed_by=reviewer,
                    scanner=_scanner_verdict(server, tools),
                ),
                has_server=server.pk in granted_servers,
                tool_ids_granted={t.pk for t in tools if t.pk in granted_tools},
                matched_tools=matched,
            )
        )
    return rows


def _matched_tools(server: McpServer, tools: list[Tool], search: str) -> list[Tool] | None:
    """The tools the search matched, or None when the server itself matched (all its tools)."""
    needle = search.lower()
    category = server.category.name if server.category_id else ""  # type: ignore[union-attr]
    if any(
        needle in text.lower() for text in (server.name, server.slug, server.description, category)
    ):
        return None
    return [t for t in tools if needle in t.name.lower() or needle in t.description.lower()]


def held_targets(*, team: Team) -> set[str]:
    """What the team already holds for every role, as the request form's values (`server:<id>`,
    `tool:<id>`): left out of its choices. A grant for one role leaves the choice in (another
    role may still need it)."""
    grants = Grant.objects.active().filter(team=team, role__isnull=True)
    return {
        f"tool:{tool_id}" if tool_id else f"server:{server_id}"
        for server_id, tool_id in grants.values_list("server_id", "tool_id")
    }


def team_access_requests(*, team: Team) -> list[AccessRequest]:
    return list(
        AccessRequest.objects.filter(team=team)
        .select_related("server", "tool", "role", "requested_by", "grant")
        .order_by("-created_at", "-id")[:200]
    )


def team_agent_tokens(*, team: Team) -> list[AgentToken]:
    """The team's tokens, usable first, with `last_used_at` as fresh as the cache knows."""
    tokens = list(
        AgentToken.objects.filter(team=team)
        .select_related("role")
        .order_by("revoked_at", "name", "-created_at")
    )
    return agent_tokens_with_last_use(tokens)


def agent_token_preflights(*, team: Team, tokens: list[AgentToken]) -> dict[int, Preflight]:
    """The catalogue's pre-flight of each usable token that declares servers: what its agent
    would be told about the servers it requires (one catalogue per role, shared)."""
    catalogues: dict[int, Catalogue] = {}
    preflights: dict[int, Preflight] = {}
    for token in tokens:
        if not token.is_usable or not token.declared_servers:
            continue
        if token.role_id not in catalogues:
            catalogues[token.role_id] = catalogue_for_agent(team_id=team.pk, role_id=token.role_id)
        preflights[token.pk] = catalogue_preflight(
            catalogue=catalogues[token.role_id], declared_servers=token.declared_servers
        )
    return preflights


def team_members(*, team: Team) -> QuerySet[Membership]:
    return Membership.objects.filter(team=team).select_related("user").order_by("user__username")


def requestable_targets(*, team: Team) -> list[tuple[McpServer, list[Tool]]]:
    """What the request form offers: approved servers, and their approved tools (asking for a
    tool no admin could approve yet is refused with the reason, see the portal services)."""
    return [
        (row.server, [tool for tool in row.tools if tool.is_approved])
        for row in browse_servers(team=team)
    ]
