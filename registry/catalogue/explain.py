"""Why a team's agent of a role can (or cannot) use a tool: `access_explain` and its bulk forms.

It evaluates, in order, the rules the catalogue selector (`catalogue_for_agent`) and the
gateway's call check (`registry.gateway.calls.call_check`) enforce, and keeps the facts behind
each: the grants (and the access requests they came from), the server's review status, the
tool's approval (hash, approver, note, acknowledged findings) against its current definition, the
role's permission classes against the tool's, health and circuit, the gateway policy and the
private-data ratchet. Rule order follows the call check's, so the first failing rule's `code` is
the code a call would be refused with. A property test (tests/test_access_explain_agrees.py)
proves the verdicts equal the catalogue's membership and the call decision on random registries.

Everything is read in a constant number of queries: `access_explain` for one (team, role, tool),
`tool_access_overview` for every team and role on one tool, `team_access_report` for every tool a
team's roles can use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Prefetch, Q
from django.utils import timezone

from registry.catalogue.naming import namespaced_tool_name, plain_name_parts
from registry.gateway.calls import (
    ALLOWED,
    CIRCUIT_OPEN,
    DEFINITION_CHANGED,
    NOT_CALLABLE,
    PRIVATE_DATA_RATCHET,
    ROLE_FORBIDS,
    SERVER_UNAVAILABLE,
    SERVER_UNHEALTHY,
    TOOL_NOT_APPROVED,
    UNKNOWN_TOOL,
    conversation_private_data_seen,
)
from registry.gateway.models import GatewayMode, IsolationScope, ServerGatewayPolicy
from registry.servers.models import (
    ApprovalState,
    CircuitState,
    Health,
    ReviewStatus,
    Tool,
    ToolApproval,
)
from registry.teams.models import AccessRequest, AccessRequestState, Grant, Team, TeamRole

# Rule names, in the order they are evaluated.
RULE_GRANT = "grant"
RULE_OFFERED = "tool_offered"
RULE_SERVER_REVIEW = "server_review"
RULE_APPROVAL = "tool_approval"
RULE_ROLE_CLASS = "role_class"
RULE_HEALTH = "health"
RULE_GATEWAY_MODE = "gateway_mode"
RULE_CIRCUIT = "circuit"
RULE_RATCHET = "private_data_ratchet"
RULES = (
    RULE_GRANT,
    RULE_OFFERED,
    RULE_SERVER_REVIEW,
    RULE_APPROVAL,
    RULE_ROLE_CLASS,
    RULE_HEALTH,
    RULE_GATEWAY_MODE,
    RULE_CIRCUIT,
    RULE_RATCHET,
)
# The rules the catalogue applies; the others are added by the gateway at call time.
CATALOGUE_RULES = frozenset(
    {RULE_GRANT, RULE_OFFERED, RULE_SERVER_REVIEW, RULE_APPROVAL, RULE_ROLE_CLASS, RULE_HEALTH}
)


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


@dataclass(frozen=True)
class AccessExplanation:
    team_id: int
    team_slug: str
    role_id: int
    role_name: str
    tool_id: int
    tool_name: str
    server_slug: str
    name: str  # namespaced: what agents call it
    at: datetime
    rules: tuple[RuleResult, ...]

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
            "tool": self.tool_name,
            "at": self.at.isoformat(),
            "verdict": self.verdict,
            "in_catalogue": self.in_catalogue,
            "callable": self.callable,
            "code": self.code,
            "first_failing_rule": failure.rule if failure is not None else None,
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


@dataclass
class _ToolFacts:
    """One tool with everything the rules read about it (no per-rule query)."""

    tool: Tool
    policy: ServerGatewayPolicy | None
    approval: ToolApproval | None  # the active one, else the latest ended one
    grants_by_team: dict[int, list[Grant]] = field(default_factory=dict)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


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


def _facts_for(tools: Sequence[Tool]) -> list[_ToolFacts]:
    policies = {
        policy.server_id: policy
        for policy in ServerGatewayPolicy.objects.filter(
            server_id__in={tool.server_id for tool in tools}
        )
    }
    facts = []
    for tool in tools:
        history: list[ToolApproval] = getattr(tool, "approval_history", [])
        active = next((approval for approval in history if approval.ended_at is None), None)
        facts.append(
            _ToolFacts(
                tool=tool,
                policy=policies.get(tool.server_id),
                approval=active or (history[0] if history else None),
            )
        )
    return facts


def _grants(team_filter: Q, server_ids: Iterable[int] | None) -> list[Grant]:
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


def _grant_facts(grant: Grant, *, at: datetime) -> dict[str, Any]:
    requests: list[AccessRequest] = getattr(grant, "request_history", [])
    state = (
        "revoked"
        if grant.revoked_at is not None
        else "expired"
        if grant.expires_at is not None and grant.expires_at <= at
        else "active"
    )
    return {
        "id": grant.pk,
        "scope": "tool" if grant.tool_id else "server",
        "role": grant.role.name if grant.role_id else None,  # type: ignore[union-attr]
        "expires_at": _iso(grant.expires_at),
        "granted_by": grant.granted_by_label,
        "granted_at": _iso(grant.granted_at),
        "note": grant.note,
        "state": state,
        "revoked_at": _iso(grant.revoked_at),
        "revoked_by": grant.revoked_by_label,
        "revoke_reason": grant.revoke_reason,
        "access_request": (
            {
                "id": requests[0].pk,
                "justification": requests[0].justification,
                "decided_by": requests[0].decided_by_label,
                "decided_at": _iso(requests[0].decided_at),
            }
            if requests
            else None
        ),
    }


def _is_active(grant: Grant, at: datetime) -> bool:
    return grant.revoked_at is None and (grant.expires_at is None or grant.expires_at > at)


def _rule_grant(facts: _ToolFacts, role: TeamRole, grants: list[Grant], at: datetime) -> RuleResult:
    tool = facts.tool
    covering = [g for g in grants if g.server_id == tool.server_id and g.tool_id in (None, tool.pk)]
    applying = [g for g in covering if g.role_id in (None, role.pk) and _is_active(g, at)]
    other_roles = [g for g in covering if g.role_id not in (None, role.pk) and _is_active(g, at)]
    lapsed = [g for g in covering if g.role_id in (None, role.pk) and not _is_active(g, at)]
    access_ends = None
    if applying:
        ends = [g.expires_at for g in applying]
        access_ends = None if any(end is None for end in ends) else max(e for e in ends if e)
    fact: dict[str, Any] = {
        "grants": [_grant_facts(g, at=at) for g in applying],
        "access_ends_at": _iso(access_ends) if applying else None,
        "grants_for_other_roles": [_grant_facts(g, at=at) for g in other_roles],
        "ended_grants": [_grant_facts(g, at=at) for g in lapsed[:5]],
    }
    if applying:
        grant = applying[0]
        what = "the whole server" if grant.tool_id is None else "this tool"
        until = f"until {access_ends.isoformat()}" if access_ends else "with no expiry"
        reason = f"The team holds an active grant of {what} for this role, {until}."
        return RuleResult(RULE_GRANT, True, reason, ALLOWED, fact)
    if other_roles:
        names = ", ".join(sorted({g.role.name for g in other_roles if g.role is not None}))
        reason = f"The team's grant covers the role(s) {names} only, not '{role.name}'."
    elif lapsed:
        reason = f"The team's grant {'was revoked' if lapsed[0].revoked_at else 'has expired'}."
    else:
        reason = "The team holds no grant of this tool or of its server."
    return RuleResult(RULE_GRANT, False, reason, UNKNOWN_TOOL, fact)


def _rule_offered(tool: Tool) -> RuleResult:
    fact = {"removed_at": _iso(tool.removed_at), "last_seen_at": _iso(tool.last_seen_at)}
    if tool.removed_at is not None:
        reason = "The server no longer offers this tool."
        return RuleResult(RULE_OFFERED, False, reason, UNKNOWN_TOOL, fact)
    return RuleResult(RULE_OFFERED, True, "The server offers the tool.", ALLOWED, fact)


def _rule_server_review(tool: Tool) -> RuleResult:
    server = tool.server
    fact = {
        "review_status": server.review_status,
        "review_note": server.review_note,
        "reviewed_at": _iso(server.reviewed_at),
    }
    if server.review_status != ReviewStatus.APPROVED:
        label = ReviewStatus(server.review_status).label.lower()
        reason = f"The server '{server.slug}' is {label}."
        return RuleResult(RULE_SERVER_REVIEW, False, reason, SERVER_UNAVAILABLE, fact)
    return RuleResult(RULE_SERVER_REVIEW, True, "The server is approved.", ALLOWED, fact)


def _rule_approval(facts: _ToolFacts) -> RuleResult:
    tool, approval = facts.tool, facts.approval
    matches = bool(tool.approved_definition_hash) and (
        tool.approved_definition_hash == tool.definition_hash
    )
    fact: dict[str, Any] = {
        "approval_state": tool.approval_state,
        "current_definition_hash": tool.definition_hash,
        "approved_definition_hash": tool.approved_definition_hash or None,
        "current_definition_matches": matches,
        "current_findings": len(tool.findings or []),
        "approval": None,
    }
    if approval is not None:
        fact["approval"] = {
            "definition_hash": approval.definition_hash,
            "approver": approval.approver_label,
            "approved_at": _iso(approval.approved_at),
            "note": approval.note,
            "findings_acknowledged": len(approval.acknowledged_findings or []),
            "active": approval.ended_at is None,
            "ended_at": _iso(approval.ended_at),
            "end_reason": approval.end_reason,
        }
    if tool.approval_state == ApprovalState.APPROVED and matches:
        reason = f"The current definition ({tool.definition_hash[:12]}) is the approved one."
        return RuleResult(RULE_APPROVAL, True, reason, ALLOWED, fact)
    if tool.approval_state == ApprovalState.CHANGED or (
        tool.approved_definition_hash and not matches
    ):
        reason = (
            f"The definition changed since it was approved ({tool.approved_definition_hash[:12]}"
            f" approved, {tool.definition_hash[:12]} now): not the tool that was approved."
        )
        return RuleResult(RULE_APPROVAL, False, reason, DEFINITION_CHANGED, fact)
    label = ApprovalState(tool.approval_state).label.lower()
    return RuleResult(RULE_APPROVAL, False, f"The tool is {label}.", TOOL_NOT_APPROVED, fact)


def _rule_role_class(tool: Tool, role: TeamRole) -> RuleResult:
    classes = role.permission_classes
    fact = {
        "tool_class": tool.permission_class,
        "derived_class": tool.permission_class_derived,
        "admin_override": tool.permission_class_override or None,
        "role_classes": classes,
    }
    override = " (set by an admin)" if tool.permission_class_override else ""
    if tool.permission_class not in classes:
        reason = (
            f"The role '{role.name}' allows {', '.join(classes) or 'no'} tools; this is a "
            f"{tool.permission_class} tool{override}."
        )
        return RuleResult(RULE_ROLE_CLASS, False, reason, ROLE_FORBIDS, fact)
    reason = f"The role '{role.name}' allows {tool.permission_class} tools{override}."
    return RuleResult(RULE_ROLE_CLASS, True, reason, ALLOWED, fact)


def _server_status(tool: Tool) -> tuple[str, str]:
    status = getattr(tool.server, "status", None)
    if status is None:
        return Health.UNKNOWN, CircuitState.CLOSED
    return status.health or Health.UNKNOWN, status.circuit_state


def _rule_health(tool: Tool, *, hide_unhealthy: bool) -> RuleResult:
    health, _ = _server_status(tool)
    status = getattr(tool.server, "status", None)
    fact = {
        "health": health,
        "hide_unhealthy": hide_unhealthy,
        "last_checked_at": _iso(status.last_checked_at) if status else None,
        "last_error": status.last_error if status else "",
    }
    if health == Health.UNHEALTHY and hide_unhealthy:
        reason = "The server is unhealthy and unhealthy servers are hidden from the catalogue."
        return RuleResult(RULE_HEALTH, False, reason, SERVER_UNHEALTHY, fact)
    flagged = " (flagged unhealthy in the catalogue)" if health == Health.UNHEALTHY else ""
    return RuleResult(RULE_HEALTH, True, f"Server health: {health}{flagged}.", ALLOWED, fact)


def _rule_gateway_mode(facts: _ToolFacts) -> RuleResult:
    policy = facts.policy
    server = facts.tool.server
    mode = policy.mode if policy else GatewayMode.ON_DEMAND
    fact = {
        "mode": mode,
        "isolation_scope": policy.isolation_scope if policy else IsolationScope.TEAM,
        "sandboxed": server.isolation == "sandbox",
        "pass_identity": policy.pass_identity if policy else False,
        "call_deadline_seconds": policy.call_deadline_seconds if policy else None,
    }
    if mode == GatewayMode.NOT_CALLABLE:
        reason = "The server is not callable through the gateway."
        return RuleResult(RULE_GATEWAY_MODE, False, reason, NOT_CALLABLE, fact)
    label = GatewayMode(mode).label
    return RuleResult(RULE_GATEWAY_MODE, True, f"Gateway mode: {label}.", ALLOWED, fact)


def _rule_circuit(tool: Tool) -> RuleResult:
    _, circuit = _server_status(tool)
    status = getattr(tool.server, "status", None)
    fact = {
        "circuit_state": circuit,
        "opened_at": _iso(status.circuit_opened_at) if status else None,
    }
    if circuit == CircuitState.OPEN:
        reason = "The server's circuit is open: calls are refused until a health check passes."
        return RuleResult(RULE_CIRCUIT, False, reason, CIRCUIT_OPEN, fact)
    return RuleResult(RULE_CIRCUIT, True, f"Circuit {circuit}.", ALLOWED, fact)


def _rule_ratchet(tool: Tool, *, conversation: str) -> RuleResult:
    applies = tool.permission_class == "connect"
    seen = conversation_private_data_seen(conversation=conversation) if applies else None
    fact = {
        "applies_to_tool": applies,
        "data_sensitivity": tool.server.data_sensitivity,
        "conversation_checked": bool(conversation),
        "private_data_read_from": seen,
    }
    if seen is not None:
        reason = (
            f"This conversation has read confidential data (from '{seen}'): connect-class "
            "tools are refused for the rest of it."
        )
        return RuleResult(RULE_RATCHET, False, reason, PRIVATE_DATA_RATCHET, fact)
    if not applies:
        reason = "Not a connect-class tool: the private-data ratchet never refuses it."
    elif conversation:
        reason = "This conversation has read no confidential data."
    else:
        reason = (
            "A connect-class tool: refused in any conversation that has read confidential data."
        )
    return RuleResult(RULE_RATCHET, True, reason, ALLOWED, fact)


def _evaluate(
    facts: _ToolFacts,
    *,
    team: Team,
    role: TeamRole,
    grants: list[Grant],
    at: datetime,
    hide_unhealthy: bool,
    conversation: str,
) -> AccessExplanation:
    tool = facts.tool
    rules = (
        _rule_grant(facts, role, grants, at),
        _rule_offered(tool),
        _rule_server_review(tool),
        _rule_approval(facts),
        _rule_role_class(tool, role),
        _rule_health(tool, hide_unhealthy=hide_unhealthy),
        _rule_gateway_mode(facts),
        _rule_circuit(tool),
        _rule_ratchet(tool, conversation=conversation),
    )
    return AccessExplanation(
        team_id=team.pk,
        team_slug=team.slug,
        role_id=role.pk,
        role_name=role.name,
        tool_id=tool.pk,
        tool_name=tool.name,
        server_slug=tool.server.slug,
        name=namespaced_tool_name(tool.server.slug, tool.name),
        at=at,
        rules=rules,
    )


def access_explain(
    *,
    team: Team,
    role: TeamRole,
    tool: Tool,
    conversation: str = "",
    at: datetime | None = None,
) -> AccessExplanation:
    """Whether the team's agent of this role can use the tool, rule by rule, with the facts.

    `conversation` is the call check's conversation key (the ratchet is checked only with one).
    """
    if role.team_id != team.pk:
        raise ValueError("The role is not one of the team's roles.")
    now = at or timezone.now()
    [facts] = _facts_for(_tools_with_facts(Q(pk=tool.pk)))
    grants = _grants(Q(team_id=team.pk), [facts.tool.server_id])
    return _evaluate(
        facts,
        team=team,
        role=role,
        grants=grants,
        at=now,
        hide_unhealthy=settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY,
        conversation=conversation,
    )


def tool_access_overview(*, tool: Tool, at: datetime | None = None) -> list[AccessExplanation]:
    """Every team and role on one tool (the admin's "who can use this"); six queries."""
    now = at or timezone.now()
    [facts] = _facts_for(_tools_with_facts(Q(pk=tool.pk)))
    roles = list(TeamRole.objects.select_related("team").order_by("team__slug", "name"))
    grants = _grants(Q(), [facts.tool.server_id])
    by_team: dict[int, list[Grant]] = {}
    for grant in grants:
        by_team.setdefault(grant.team_id, []).append(grant)
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    return [
        _evaluate(
            facts,
            team=role.team,
            role=role,
            grants=by_team.get(role.team_id, []),
            at=now,
            hide_unhealthy=hide,
            conversation="",
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
    grants = _grants(Q(team_id=team.pk), None)
    active = [grant for grant in grants if _is_active(grant, now)]
    server_ids = {grant.server_id for grant in active if grant.tool_id is None}
    tool_ids = {grant.tool_id for grant in active if grant.tool_id is not None}
    if not active:
        return []
    facts = _facts_for(_tools_with_facts(Q(server_id__in=server_ids) | Q(pk__in=tool_ids)))
    roles = list(team.roles.order_by("name"))
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    result = []
    for role in roles:
        for tool_facts in facts:
            explanation = _evaluate(
                tool_facts,
                team=team,
                role=role,
                grants=grants,
                at=now,
                hide_unhealthy=hide,
                conversation="",
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
    grants = _grants(Q(team_id=team.pk), [request.server_id])
    if request.state == AccessRequestState.PENDING:
        grants.append(_hypothetical_grant(request, at=now))
    tool_filter = (
        Q(pk=request.tool_id)
        if request.tool_id
        else Q(server_id=request.server_id, removed_at__isnull=True)
    )
    facts = _facts_for(_tools_with_facts(tool_filter))
    roles = [request.role] if request.role is not None else list(team.roles.order_by("name"))
    hide = settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY
    return [
        _evaluate(
            tool_facts,
            team=team,
            role=role,
            grants=grants,
            at=now,
            hide_unhealthy=hide,
            conversation="",
        )
        for role in roles
        for tool_facts in facts
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


ACCESS_REPORT_COLUMNS = (
    "team",
    "role",
    "name",
    "server",
    "tool",
    "permission_class",
    "callable",
    "refused_at_call_time",
    "grant_id",
    "grant_scope",
    "grant_role",
    "grant_expires_at",
    "granted_by",
    "granted_at",
    "access_request_id",
    "access_ends_at",
    "approved_definition_hash",
    "current_definition_hash",
    "definition_matches",
    "approver",
    "approved_at",
    "approval_note",
    "findings_acknowledged",
    "server_review_status",
    "health",
    "gateway_mode",
    "isolation_scope",
)


def access_report_rows(explanations: Iterable[AccessExplanation]) -> list[dict[str, Any]]:
    """One flat row per (role, tool, grant behind it): the CSV form of `team_access_report`."""
    rows = []
    for explanation in explanations:
        grant_rule = explanation.rule(RULE_GRANT).facts
        approval_rule = explanation.rule(RULE_APPROVAL).facts
        approval = approval_rule["approval"] or {}
        gateway = explanation.rule(RULE_GATEWAY_MODE).facts
        failure = explanation.first_failure
        common = {
            "team": explanation.team_slug,
            "role": explanation.role_name,
            "name": explanation.name,
            "server": explanation.server_slug,
            "tool": explanation.tool_name,
            "permission_class": explanation.rule(RULE_ROLE_CLASS).facts["tool_class"],
            "callable": explanation.callable,
            "refused_at_call_time": failure.code if failure is not None else "",
            "access_ends_at": grant_rule["access_ends_at"] or "",
            "approved_definition_hash": approval_rule["approved_definition_hash"] or "",
            "current_definition_hash": approval_rule["current_definition_hash"],
            "definition_matches": approval_rule["current_definition_matches"],
            "approver": approval.get("approver", ""),
            "approved_at": approval.get("approved_at", ""),
            "approval_note": approval.get("note", ""),
            "findings_acknowledged": approval.get("findings_acknowledged", 0),
            "server_review_status": explanation.rule(RULE_SERVER_REVIEW).facts["review_status"],
            "health": explanation.rule(RULE_HEALTH).facts["health"],
            "gateway_mode": gateway["mode"],
            "isolation_scope": gateway["isolation_scope"],
        }
        for grant in grant_rule["grants"] or [{}]:
            request = grant.get("access_request") or {}
            rows.append(
                {
                    **common,
                    "grant_id": grant.get("id", ""),
                    "grant_scope": grant.get("scope", ""),
                    "grant_role": grant.get("role") or ("" if not grant else "(every role)"),
                    "grant_expires_at": grant.get("expires_at") or "",
                    "granted_by": grant.get("granted_by", ""),
                    "granted_at": grant.get("granted_at", ""),
                    "access_request_id": request.get("id", ""),
                }
            )
    return [{column: row[column] for column in ACCESS_REPORT_COLUMNS} for row in rows]
