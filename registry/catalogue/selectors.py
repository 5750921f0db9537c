"""The one read that decides what an agent sees: `catalogue_for_agent`, and what derives from it.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from registry.catalogue.naming import namespaced_tool_name
from registry.core.query_templates import Placeholders, compiled_query, padded
from registry.servers.gateway_policy import (
    DEFAULT_CALL_DEADLINE_SECONDS,
    DEFAULT_MAX_CALL_SECONDS,
)
from registry.servers.models import Health, McpServer, ReviewStatus
from registry.servers.selectors import approved_tools
from registry.servers.tool_definitions import TASK_REQUIRED_REASON, TASK_SUPPORT
from registry.teams.models import DependencyLevel, Grant, TeamRole

_TOOL_FIELDS = (
    "pk",
    "name",
    "title",
    "description",
    "input_schema",
    "output_schema",
    "annotations",
    "permission_class",
    "definition_hash",
    "server_id",
    "server__slug",
    "server__name",
    "server__description",
    "server__version",
    "server__homepage_url",
    "server__repository_url",
    "server__created_at",
    "server__updated_at",
    "server__category__slug",
    "server__category__name",
    "server__status__health",
    "server__gateway_policy__call_deadline_seconds",
    "server__gateway_policy__max_call_seconds",
    "server__upstream_auth",
)


@dataclass(frozen=True)
class CatalogueServer:
    id: int
    slug: str
    name: str
    description: str
    version: str
    homepage_url: str
    repository_url: str
    category_slug: str | None
    category_name: str | None
    health: str
    created_at: datetime
    updated_at: datetime
    tool_count: int = 0

    @property
    def unhealthy(self) -> bool:
        return self.health == Health.UNHEALTHY


@dataclass(frozen=True)
class CatalogueTool:
    name: str  # namespaced: what agents call it
    tool_id: int
    tool_name: str
    server_id: int
    server_slug: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any]
    permission_class: str
    definition_hash: str
    server_health: str
    access_expires_at: datetime | None
    # The server's call deadline, and the maximum its progress may stretch it to (gateway).
    call_deadline_seconds: float = DEFAULT_CALL_DEADLINE_SECONDS
    max_call_seconds: float = DEFAULT_MAX_CALL_SECONDS
    task_support: str = ""  # the definition's execution.taskSupport, if any
    # The server's UpstreamAuth: per-person tools carry the caller's account mark when rendered.
    upstream_auth: str = "shared"

    @property
    def unhealthy(self) -> bool:
        return self.server_health == Health.UNHEALTHY

    @property
    def not_callable_reason(self) -> str | None:
        """Why the gateway cannot call the tool, or None: it can."""
        return TASK_REQUIRED_REASON if self.task_support == "required" else None


@dataclass(frozen=True)
class PreflightItem:
    server: str
    level: str
    status: str  # ok | degraded | unhealthy | not_granted | no_visible_tools | unavailable
    detail: str


@dataclass(frozen=True)
class Preflight:
    ok: bool
    items: list[PreflightItem]


@dataclass(frozen=True)
class Catalogue:
    team_id: int
    team_slug: str
    team_name: str
    role_id: int
    role_name: str
    permission_classes: list[str]
    generated_at: datetime
    servers: list[CatalogueServer]
    tools: list[CatalogueTool]
    granted_server_ids: frozenset[int] = field(default_factory=frozenset)

    def tool_named(self, name: str) -> CatalogueTool | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None


class UnknownRole(Exception):
    """The role is not one of the team's (a token outlived its role's team: never served)."""


def _latest(a: datetime | None, b: datetime | None, *, first: bool) -> datetime | None:
    """The later of two expiries where None means never; `first` marks `b` as the first one
    seen (there is no `a` yet)."""
    if first:
        return b
    if a is None or b is None:
        return None
    return max(a, b)


@dataclass(frozen=True)
class VisibleRole:
    """The role a catalogue is for, as the documents show it."""

    name: str
    team_slug: str
    team_name: str
    permission_classes: list[str]


@dataclass(frozen=True)
class VisibleRows:
    """What the visibility rule lets a team's agent of a role see now, as database rows (the
    fields asked for, then the expressions, in that order: `columns` gives each one's place),
    before names, expiries and shapes are made of them."""

    role: VisibleRole
    rows: list[Sequence[Any]]
    columns: dict[str, int]
    server_expiry: dict[int, datetime | None]
    tool_expiry: dict[int, datetime | None]
    granted_server_ids: frozenset[int]
    now: datetime

    def access_expires_at(self, server_id: int, tool_id: int) -> datetime | None:
        """When the team's access to this tool ends: the latest of the grants that apply."""
        in_server, in_tool = server_id in self.server_expiry, tool_id in self.tool_expiry
        if in_server and in_tool:
            return _latest(self.server_expiry[server_id], self.tool_expiry[tool_id], first=False)
        if in_server:
            return self.server_expiry[server_id]
        return self.tool_expiry[tool_id]


_ROLE_FIELDS = ("name", "allows_read", "allows_write", "allows_connect", "team__slug", "team__name")


# An expression's text, for the shape: kept with the expression (so its id cannot be reused).
_EXPRESSION_TEXTS: dict[int, tuple[Any, str]] = {}


def _expression_key(expression: Any) -> str:
    kept = _EXPRESSION_TEXTS.get(id(expression))
    if kept is None or kept[0] is not expression:
        kept = (expression, repr(expression))
        if len(_EXPRESSION_TEXTS) < 1000:  # callers pass module constants; never grow unbounded
            _EXPRESSION_TEXTS[id(expression)] = kept
    return kept[1]


def _role_query(values: Placeholders) -> QuerySet[TeamRole]:
    return (
        TeamRole.objects.filter(pk=values.number("role_id"), team_id=values.number("team_id"))
        .order_by()
        .values_list(*_ROLE_FIELDS)
    )


def _grants_query(values: Placeholders) -> QuerySet[Grant]:
    return (
        Grant.objects.active(values.moment("now"))
        .for_role(values.number("role_id"))
        .filter(team_id=values.number("team_id"))
        .order_by()
        .values_list("server_id", "tool_id", "expires_at")
    )


def _tools_query(
    values: Placeholders,
    *,
    classes: tuple[str, ...],
    servers: int,
    tools: int,
    category: bool,
    hide_unhealthy: bool,
    fields: tuple[str, ...],
    expressions: dict[str, Any],
) -> QuerySet[Any]:
    """The visible tools of the granted servers and tools (`servers` and `tools` ids, padded)."""
    queryset = (
        approved_tools()
        .filter(server__review_status=ReviewStatus.APPROVED, permission_class__in=classes)
        .filter(
            Q(server_id__in=values.numbers("server_ids", servers))
            | Q(pk__in=values.numbers("tool_ids", tools))
        )
    )
    if category:
        queryset = queryset.filter(server__category__slug=values.text("category"))
    if hide_unhealthy:
        queryset = queryset.exclude(server__status__health=Health.UNHEALTHY)
    if expressions:
        queryset = queryset.annotate(**expressions)
    return queryset.order_by().values_list(*fields, *expressions)


def visible_tool_rows(
    *,
    team_id: int,
    role_id: int,
    category: str | None = None,
    at: datetime | None = None,
    fields: tuple[str, ...] = _TOOL_FIELDS,
    **expressions: Any,
) -> VisibleRows:
    """The three queries of the visibility rule: the role, the team's grants, the tools (`fields`
    and `expressions` of each, with `pk` and `server_id` always among the fields).

    Each query is compiled once per shape (registry.core.query_templates): an uncached catalogue
    spent most of its CPU building and compiling them again."""
    now = at or timezone.now()
    found = compiled_query(("catalogue-role",), _role_query).run(role_id=role_id, team_id=team_id)
    if not found:
        raise UnknownRole(role_id)
    name, allows_read, allows_write, allows_connect, team_slug, team_name = found[0]
    classes = TeamRole(
        allows_read=allows_read, allows_write=allows_write, allows_connect=allows_connect
    ).permission_classes
    role = VisibleRole(
        name=name, team_slug=team_slug, team_name=team_name, permission_classes=classes
    )

    grants = compiled_query(("catalogue-grants",), _grants_query).run(
        now=now, role_id=role_id, team_id=team_id
    )
    # When access to each server (whole) and tool (alone) ends: the latest of its grants.
    server_expiry: dict[int, datetime | None] = {}
    tool_expiry: dict[int, datetime | None] = {}
    for server_id, tool_id, expires_at in grants:
        target, key = (server_expiry, server_id) if tool_id is None else (tool_expiry, tool_id)
        target[key] = _latest(target.get(key), expires_at, first=key not in target)

    server_ids, tool_ids = padded(list(server_expiry)), padded(list(tool_expiry))
    hide_unhealthy = bool(settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY)
    shape = (
        "catalogue-tools",
        tuple(classes),
        len(server_ids),
        len(tool_ids),
        bool(category),
        hide_unhealthy,
        fields,
        tuple((name, _expression_key(expression)) for name, expression in expressions.items()),
    )
    template = compiled_query(
        shape,
        lambda values: _tools_query(
            values,
            classes=tuple(classes),
            servers=len(server_ids),
            tools=len(tool_ids),
            category=bool(category),
            hide_unhealthy=hide_unhealthy,
            fields=fields,
            expressions=expressions,
        ),
    )
    return VisibleRows(
        role=role,
        rows=template.run(server_ids=server_ids, tool_ids=tool_ids, category=category),
        columns={name: place for place, name in enumerate((*fields, *expressions))},
        server_expiry=server_expiry,
        tool_expiry=tool_expiry,
        granted_server_ids=frozenset(server_id for server_id, _, _ in grants),
        now=now,
    )


def call_deadlines(deadline: float | None, maximum: float | None) -> tuple[float, float]:
    """A server's call deadline and maximum call time (its progress may stretch the deadline
    up to it), from its gateway policy's columns (None: no policy, the defaults)."""
    deadline = DEFAULT_CALL_DEADLINE_SECONDS if deadline is None else float(deadline)
    maximum = DEFAULT_MAX_CALL_SECONDS if maximum is None else float(maximum)
    return deadline, max(maximum, deadline)


def catalogue_for_agent(
    *, team_id: int, role_id: int, category: str | None = None, at: datetime | None = None
) -> Catalogue:
    """The tools a team's agent of this role sees now, namespaced and sorted by name."""
    visible = visible_tool_rows(
        team_id=team_id, role_id=role_id, category=category, at=at, task_support=TASK_SUPPORT
    )
    role, now = visible.role, visible.now
    rows = [dict(zip(visible.columns, row, strict=True)) for row in visible.rows]

    servers: dict[int, CatalogueServer] = {}
    counts: dict[int, int] = {}
    entries: list[CatalogueTool] = []
    for row in rows:
        server_id = row["server_id"]
        health = row["server__status__health"] or Health.UNKNOWN
        if server_id not in servers:
            servers[server_id] = CatalogueServer(
                id=server_id,
                slug=row["server__slug"],
                name=row["server__name"],
                description=row["server__description"],
                version=row["server__version"],
                homepage_url=row["server__homepage_url"],
                repository_url=row["server__repository_url"],
                category_slug=row["server__category__slug"],
                category_name=row["server__category__name"],
                health=health,
                created_at=row["server__created_at"],
                updated_at=row["server__updated_at"],
            )
        counts[server_id] = counts.get(server_id, 0) + 1
        expiry = visible.access_expires_at(server_id, row["pk"])
        deadline, maximum = call_deadlines(
            row["server__gateway_policy__call_deadline_seconds"],
            row["server__gateway_policy__max_call_seconds"],
        )
        entries.append(
            CatalogueTool(
                name=namespaced_tool_name(row["server__slug"], row["name"]),
                tool_id=row["pk"],
                tool_name=row["name"],
                server_id=server_id,
                server_slug=row["server__slug"],
                title=row["title"],
                description=row["description"],
                input_schema=row["input_schema"] or {},
                output_schema=row["output_schema"],
                annotations=row["annotations"] or {},
                permission_class=row["permission_class"],
                definition_hash=row["definition_hash"],
                server_health=health,
                access_expires_at=expiry,
                call_deadline_seconds=deadline,
                max_call_seconds=maximum,
                task_support=row["task_support"] or "",
                upstream_auth=row["server__upstream_auth"] or "shared",
            )
        )
    entries.sort(key=lambda entry: entry.name)
    server_list = sorted(
        (
            CatalogueServer(**{**server.__dict__, "tool_count": counts[server.id]})
            for server in servers.values()
        ),
        key=lambda server: server.slug,
    )
    return Catalogue(
        team_id=team_id,
        team_slug=role.team_slug,
        team_name=role.team_name,
        role_id=role_id,
        role_name=role.name,
        permission_classes=role.permission_classes,
        generated_at=now,
        servers=server_list,
        tools=entries,
        granted_server_ids=visible.granted_server_ids,
    )


# A declared server's pre-flight status by its health (else "ok").
_PREFLIGHT_STATUS: dict[str, str] = {Health.UNHEALTHY: "unhealthy", Health.DEGRADED: "degraded"}


def catalogue_preflight(
    *, catalogue: Catalogue, declared_servers: Mapping[str, list[str]]
) -> Preflight:
    """Tell the agent which of the servers it declared it can use, and why not where it cannot.

    A server the registry does not offer (unknown, not approved) is `unavailable` whichever it is,
    so that the answer says nothing about servers a team cannot browse.
    """
    wanted = {slug for slugs in declared_servers.values() for slug in slugs}
    if not wanted:
        return Preflight(ok=True, items=[])
    approved = {
        slug: (pk, health or Health.UNKNOWN)
        for slug, pk, health in McpServer.objects.filter(
            slug__in=wanted, review_status=ReviewStatus.APPROVED
        ).values_list("slug", "pk", "status__health")
    }
    visible = {server.slug: server for server in catalogue.servers}
    items: list[PreflightItem] = []
    ok = True
    for level in DependencyLevel.values:
        for slug in sorted(set(declared_servers.get(level, []))):
            server = visible.get(slug)
            if server is not None:
                status = _PREFLIGHT_STATUS.get(server.health, "ok")
                detail = f"{server.tool_count} tool(s), health {server.health}."
            elif slug not in approved:
                status, detail = "unavailable", "No approved server has this slug."
            elif approved[slug][0] not in catalogue.granted_server_ids:
                status, detail = "not_granted", "The team has no grant on this server for the role."
            elif approved[slug][1] == Health.UNHEALTHY:
                status, detail = "unhealthy", "Hidden from the catalogue while it is unhealthy."
            else:
                status = "no_visible_tools"
                detail = "Granted, but none of its tools is approved and allowed for the role."
            if level == DependencyLevel.REQUIRED and status not in ("ok", "degraded"):
                ok = False
            items.append(PreflightItem(server=slug, level=level, status=status, detail=detail))
    return Preflight(ok=ok, items=items)


def catalogue_resolve_tool(*, team_id: int, role_id: int, name: str) -> CatalogueTool | None:
    """The (server, tool) behind a namespaced name, as the team's agent of this role may call it,
    or None. For the gateway: it resolves only what the catalogue would show."""
    return catalogue_for_agent(team_id=team_id, role_id=role_id).tool_named(name)
