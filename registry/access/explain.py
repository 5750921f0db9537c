"""Why a team's agent of a role can (or cannot) use a tool: `access_explain` and its bulk forms.

More: docs/access.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Prefetch, Q
from django.utils import timezone

from registry.access.grant_facts import access_ends
from registry.access.rule_types import (
    Kind,
    Moment,
    Stage,
    ToolFacts,
    ToolRecord,
)
from registry.access.rules import (
    ALLOWED,
    RULE_APPROVAL,
    RULE_CIRCUIT,
    RULE_GATEWAY_MODE,
    RULE_GRANT,
    RULE_HEALTH,
    RULE_OFFERED,
    RULE_PERSON_STANDING,
    RULE_RATCHET,
    RULE_ROLE_CLASS,
    RULE_SERVER_REVIEW,
    RULE_TOKEN,
    RULE_UPSTREAM_ACCOUNT,
    TOOL_RULES,
    server_health_and_circuit,
)
from registry.catalogue.naming import namespaced_tool_name, plain_name_parts
from registry.servers.gateway_policy import GatewayMode, ServerGatewayPolicy
from registry.servers.models import ReviewStatus, Tool, ToolApproval
from registry.teams.callers import Caller
from registry.teams.models import AccessRequest, AccessRequestState, Grant, Team, TeamRole

__all__ = [
    "RULES",
    "RULE_APPROVAL",
    "RULE_CIRCUIT",
    "RULE_GATEWAY_MODE",
    "RULE_GRANT",
    "RULE_HEALTH",
    "RULE_OFFERED",
    "RULE_RATCHET",
    "RULE_ROLE_CLASS",
    "RULE_SERVER_REVIEW",
    "RULE_UPSTREAM_ACCOUNT",
    "AccessExplanation",
    "RuleResult",
    "access_explain",
    "access_request_blockers",
    "team_access_report",
    "tool_access_overview",
    "tool_by_name",
    "tool_for_agent_name",
]

# The rules an explanation shows, in order (the caller rules need a caller: it explains a team
# role).
RULES = tuple(rule.name for rule in TOOL_RULES)
# The rules the catalogue applies; the others are added by the gateway at call time.
CATALOGUE_RULES = frozenset(rule.name for rule in TOOL_RULES if rule.stage == Stage.CATALOGUE)


# Each rule in words, for people (the portal's "Why (not)?" page).
RULE_WORDS = {
    RULE_TOKEN: "The agent's token is valid",
    RULE_PERSON_STANDING: "The person is still in the team",
    RULE_GRANT: "The team has been given access",
    RULE_OFFERED: "The server still offers the tool",
    RULE_SERVER_REVIEW: "The server is approved",
    RULE_APPROVAL: "This exact version of the tool is approved",
    RULE_ROLE_CLASS: "The role may use this kind of tool",
    RULE_HEALTH: "The server is healthy",
    RULE_GATEWAY_MODE: "The gateway may call the server",
    RULE_CIRCUIT: "The server is not failing right now",
    RULE_RATCHET: "No outside connection after private data",
}


@dataclass(frozen=True)
class RuleResult:
    rule: str
    passed: bool
    reason: str  # one sentence saying what was found
    code: str  # the call check's refusal code when it fails; "allowed" when it passes
    facts: dict[str, Any]

    @property
    def at_call_time(self) -> bool:
        return self.rule not in CATALOGUE_RULES

    @property
    def words(self) -> str:
        """The rule in words, for people."""
        return RULE_WORDS.get(self.rule, self.rule)


@dataclass(frozen=True)
class AccessExplanation:
    team_id: int
    team_slug: str
    role_id: int
    role_name: str
    tool_id: int  # the tool's, or the resource's or prompt's (kind)
    tool_name: str  # as the server names it (a resource: its URI)
    server_slug: str
    name: str  # namespaced: what agents call it (a resource: its toolroom:// URI)
    at: datetime
    rules: tuple[RuleResult, ...]
    kind: str = Kind.TOOL  # tool, resource or prompt
    # A concrete URI asked about, read through this resource template (`name`), else ''.
    expanded_uri: str = ""

    @property
    def first_failure(self) -> RuleResult | None:
        return next((rule for rule in self.rules if not rule.passed), None)

    @property
    def in_catalogue(self) -> bool:
        return all(rule.passed for rule in self.rules if not rule.at_call_time)

    @property
    def callable(self) -> bool:
        return self.first_failure is None

    @property
    def code(self) -> str:
        failure = self.first_failure
        return failure.code if failure is not None else ALLOWED

    @property
    def verdict(self) -> str:
        if self.callable:
            return "callable"
        return "in catalogue, refused at call time" if self.in_catalogue else "not available"

    def rule(self, name: str) -> RuleResult:
        return next(rule for rule in self.rules if rule.rule == name)

    def as_dict(self) -> dict[str, Any]:
        failure = self.first_failure
        return {
            "name": self.name,
            "team": self.team_slug,
            "role": self.role_name,
            "server": self.server_slug,
            "kind": self.kind,
            self.kind: self.tool_name,
            "at": self.at.isoformat(),
            "verdict": self.verdict,
            "in_catalogue": self.in_catalogue,
            "callable": self.callable,
            "code": self.code,
            "first_failing_rule": failure.rule if failure is not None else None,
            **({"expanded_uri": self.expanded_uri} if self.expanded_uri else {}),
            "rules": [
                {
                    "rule": rule.rule,
                    "passed": rule.passed,
                    "at_call_time": rule.at_call_time,
                    "code": rule.code,
                    "reason": rule.reason,
                    "facts": rule.facts,
                }
                for rule in self.rules
            ],
        }


@dataclass(frozen=True)
class _ToolRows:
    """One tool with the rows the rules read about it (no per-rule query)."""

    tool: Tool
    policy: ServerGatewayPolicy | None
    approval: ToolApproval | None  # the active one, else the latest ended one


def _tools_with_facts(tool_filter: Q) -> list[Tool]:
    """Tools with server, status, policy and approvals: three queries however many."""
    return list(
        Tool.objects.filter(tool_filter)
        .select_related("server", "server__status")
        .prefetch_related(
            Prefetch(
                "approvals",
                queryset=ToolApproval.objects.order_by("-approved_at", "-id"),
                to_attr="approval_history",
            )
        )
        .order_by("server__slug", "name")
    )


def _rows_for(tools: Sequence[Tool]) -> list[_ToolRows]:
    policies = {
        policy.server_id: policy
        for policy in ServerGatewayPolicy.objects.filter(
            server_id__in={tool.server_id for tool in tools}
        )
    }
    rows = []
    for tool in tools:
        history: list[ToolApproval] = getattr(tool, "approval_history", [])
        active = next((approval for approval in history if approval.ended_at is None), None)
        rows.append(
            _ToolRows(
                tool=tool,
                policy=policies.get(tool.server_id),
                approval=active or (history[0] if history else None),
            )
        )
    return rows


def grants_with_requests(team_filter: Q, server_ids: Iterable[int] | None) -> list[Grant]:
    """Every grant (active or not) of these teams on these servers (None: on any), with the
    access requests they came from."""
    if server_ids is not None:
        team_filter &= Q(server_id__in=set(server_ids))
    return list(
        Grant.objects.filter(team_filter)
        .select_related("role")
        .prefetch_related(
            Prefetch(
                "access_requests",
                queryset=AccessRequest.objects.order_by("-decided_at", "-id"),
                to_attr="request_history",
            )
        )
        .order_by("-granted_at", "-id")
    )


def grant_is_active(grant: Grant, at: datetime) -> bool:
    return grant.revoked_at is None and (grant.expires_at is None or grant.expires_at > at)


def _record(
    rows: _ToolRows,
    *,
    role: TeamRole,
    grants: list[Grant],
    at: datetime,
    hide_unhealthy: bool,
    caller: Caller | None,
) -> ToolRecord:
    tool = rows.tool
    covering = [g for g in grants if g.server_id == tool.server_id and g.tool_id in (None, tool.pk)]
    return ToolRecord(
        tool=tool,
        role=role,
        policy=rows.policy,
        approval=rows.approval,
        applying=[g for g in covering if g.role_id in (None, role.pk) and grant_is_active(g, at)],
        other_roles=[
            g for g in covering if g.role_id not in (None, role.pk) and grant_is_active(g, at)
        ],
        lapsed=[g for g in covering if g.role_id in (None, role.pk) and not grant_is_active(g, at)],
        at=at,
        hide_unhealthy=hide_unhealthy,
        caller=caller,
    )


def tool_facts_of(record: ToolRecord) -> ToolFacts:
    """The facts the rules decide on, as the explanation's rows give them."""
    tool = record.tool
    if tool is None:
        raise ValueError("Not the record of a tool.")
    health, circuit = server_health_and_circuit(tool.server)
    ends = access_ends([grant.expires_at for grant in record.applying])
    return ToolFacts(
        name=namespaced_tool_name(tool.server.slug, tool.name),
        server_slug=tool.server.slug,
        granted=bool(record.applying),
        access_ends_at=ends.timestamp() if record.applying and ends is not None else None,
        offered=tool.removed_at is None,
        review_status=tool.server.review_status,
        approval_state=tool.approval_state,
        approved_definition_hash=tool.approved_definition_hash,
        definition_hash=tool.definition_hash,
        permission_class=tool.permission_class,
        role_name=record.role.name,
        role_classes=tuple(record.role.permission_classes),
        health=health,
        hide_unhealthy=record.hide_unhealthy,
        gateway_mode=record.policy.mode if record.policy else GatewayMode.ON_DEMAND,
        circuit_state=circuit,
        upstream_auth=tool.server.upstream_auth,
    )


def _evaluate(
    rows: _ToolRows,
    *,
    team: Team,
    role: TeamRole,
    grants: list[Grant],
    at: datetime,
    hide_unhealthy: bool,
    caller: Caller | None,
) -> AccessExplanation:
    record = _record(
        rows,
        role=role,
        grants=grants,
        at=at,
        hide_unhealthy=hide_unhealthy,
        caller=caller,
    )
    facts = tool_facts_of(record)
    results = rule_results(record, facts)
    tool = rows.tool
    return AccessExplanation(
        team_id=team.pk,
        team_slug=team.slug,
        role_id=role.pk,
        role_name=role.name,
        tool_id=tool.pk,
        tool_name=tool.name,
        server_slug=tool.server.slug,
        name=facts.name,
        at=at,
        rules=results,
    )


def rule_results(record: ToolRecord, facts: ToolFacts) -> tuple[RuleResult, ...]:
    """Every rule, in order, evaluated on the facts and explained from the record: the one
    evaluation of a tool's, a resource's and a prompt's explanation."""
    moment = Moment(now=record.at.timestamp(), caller=record.caller)
    results = []
    for rule in TOOL_RULES:
        refusal = rule.refuse(facts, moment)
        explanation = rule.explain(record, refusal)
        results.append(
            RuleResult(
                rule=rule.name,
                passed=refusal is None,
                reason=explanation.reason,
                code=refusal.code if refusal is not None else ALLOWED,
                facts=explanation.facts,
            )
        )
    return tuple(results)


def access_explain(
    *,
    team: Team,
    role: TeamRole,
    tool: Tool,
    caller: Caller | None = None,
    at: datetime | None = None,
) -> AccessExplanation:
    """Whether the team's agent of this role can use the tool, rule by rule, with the facts.

    `caller`: the token (or person) whose private-data marks the ratchet checks; without one the
    ratchet says when it would apply.
    """
    if role.team_id != team.pk:
        raise ValueError("The role is not one of the team's roles.")
    now = at or timezone.now()
    [rows] = _rows_for(_tools_with_facts(Q(pk=tool.pk)))
    grants = grants_with_requests(Q(team_id=team.pk), [rows.tool.server_id])
    return _evaluate(
        rows,
        team=team,
        role=role,
        grants=grants,
        at=now,
        hide_unhealthy=settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY,
        caller=caller,
    )


def tool_access_overview(*, tool: Tool, at: datetime | None = None) -> list[AccessExplanation]:
    """Every team and role on one tool (the admin's "who can use this"); six queries."""
    now = at or timezone.now()
    [rows] = _rows_for(_tools_with_facts(Q(pk=tool.pk)))
    roles = list(TeamRole.objects.select_related("team").order_by("team__slug", "name"))
    grants = grants_with_requests(Q(), [rows.tool.server_id])
    by_team: dict[int, list[Grant]] = {}
    for grant in grants:
        by_team.setdefault(grant.team_id, []).append(grant)
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    return [
        _evaluate(
            rows,
            team=role.team,
            role=role,
            grants=by_team.get(role.team_id, []),
            at=now,
            hide_unhealthy=hide,
            caller=None,
        )
        for role in roles
    ]


def team_access_report(
    *, team: Team, at: datetime | None = None, only_usable: bool = True
) -> list[AccessExplanation]:
    """Every (role, tool) the team holds a grant on, explained: the auditors' export.

    With `only_usable` (the default) only the tools in the role's catalogue are kept.
    """
    now = at or timezone.now()
    grants = grants_with_requests(Q(team_id=team.pk), None)
    active = [grant for grant in grants if grant_is_active(grant, now)]
    server_ids = {grant.server_id for grant in active if grant.tool_id is None}
    tool_ids = {grant.tool_id for grant in active if grant.tool_id is not None}
    if not active:
        return []
    every_rows = _rows_for(_tools_with_facts(Q(server_id__in=server_ids) | Q(pk__in=tool_ids)))
    roles = list(team.roles.order_by("name"))
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    result = []
    for role in roles:
        for rows in every_rows:
            explanation = _evaluate(
                rows,
                team=team,
                role=role,
                grants=grants,
                at=now,
                hide_unhealthy=hide,
                caller=None,
            )
            if explanation.in_catalogue or not only_usable:
                result.append(explanation)
    return result


def tool_by_name(*, name: str) -> Tool | None:
    """Any tool (offered or not, any server) by its namespaced name: for admins only."""
    candidates = Tool.objects.select_related("server")
    parts = plain_name_parts(name)
    if parts is not None:
        candidates = candidates.filter(server__slug=parts[0], name=parts[1])
    for tool in candidates.order_by("pk").iterator():
        if namespaced_tool_name(tool.server.slug, tool.name) == name:
            return tool
    return None


def access_request_blockers(
    *, request: AccessRequest, at: datetime | None = None
) -> list[AccessExplanation]:
    """What would still stop each tool the request asks for if it were approved now: every
    (role, tool) it covers, explained as if its grant existed (the grant rule then passes).
    A request already decided or withdrawn is explained as things stand, without that grant."""
    now = at or timezone.now()
    team = request.team
    grants = grants_with_requests(Q(team_id=team.pk), [request.server_id])
    if request.state == AccessRequestState.PENDING:
        grants.append(_hypothetical_grant(request, at=now))
    tool_filter = (
        Q(pk=request.tool_id)
        if request.tool_id
        else Q(server_id=request.server_id, removed_at__isnull=True)
    )
    every_rows = _rows_for(_tools_with_facts(tool_filter))
    roles = [request.role] if request.role is not None else list(team.roles.order_by("name"))
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    return [
        _evaluate(
            rows,
            team=team,
            role=role,
            grants=grants,
            at=now,
            hide_unhealthy=hide,
            caller=None,
        )
        for role in roles
        for rows in every_rows
    ]


def _hypothetical_grant(request: AccessRequest, *, at: datetime) -> Grant:
    """The grant approving the request would create (never saved)."""
    return Grant(
        team=request.team,
        server_id=request.server_id,
        tool_id=request.tool_id,
        role=request.role,
        expires_at=request.wished_expires_at,
        granted_by_label="(this request, if approved)",
        granted_at=at,
    )


PICKER_LIMIT = 2000


def tool_names_to_pick(*, team: Team | None = None) -> list[str]:
    """The namespaced names a "Why (not)?" picker offers (one query): for a team, the tools it
    may ask about (as `tool_for_agent_name`); for the admin (team None), every offered tool. At
    most PICKER_LIMIT; the field takes any name."""
    tools = Tool.objects.filter(removed_at__isnull=True)
    if team is not None:
        granted = Grant.objects.active().filter(team=team)
        tools = tools.filter(
            Q(server__review_status=ReviewStatus.APPROVED)
            | Q(server_id__in=granted.filter(tool__isnull=True).values("server_id"))
            | Q(pk__in=granted.filter(tool__isnull=False).values("tool_id"))
        )
    rows = tools.order_by("server__slug", "name").values_list("server__slug", "name")
    return [namespaced_tool_name(slug, name) for slug, name in rows[:PICKER_LIMIT]]


def tool_for_agent_name(*, team: Team, name: str, at: datetime | None = None) -> Tool | None:
    """The tool behind a namespaced name that the team may ask about, or None.

    A team may ask about a tool of an approved server (any team can browse those) or one its
    grants cover; anything else answers None, exactly like a name that does not exist, so nothing
    about other teams' servers leaks.
    """
    now = at or timezone.now()
    candidates = Tool.objects.filter(removed_at__isnull=True).select_related("server")
    parts = plain_name_parts(name)
    if parts is not None:  # one row at most; a hashed name is matched against the visible ones
        candidates = candidates.filter(server__slug=parts[0], name=parts[1])
    granted = Grant.objects.active(now).filter(team=team)
    visible = candidates.filter(
        Q(server__review_status=ReviewStatus.APPROVED)
        | Q(server_id__in=granted.filter(tool__isnull=True).values("server_id"))
        | Q(pk__in=granted.filter(tool__isnull=False).values("tool_id"))
    )
    for tool in visible.order_by("pk").iterator():
        if namespaced_tool_name(tool.server.slug, tool.name) == name:
            return tool
    return None
