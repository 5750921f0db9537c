"""The access rules, in order: the one list that decides whether a team's agent of a role may use a
tool now, with the code and the words of every refusal and the explanation of every verdict.

More: docs/access.md, "Module notes"."""

from __future__ import annotations

from typing import Any

from registry.access import item_explanations
from registry.access.grant_facts import access_ends, grant_facts, iso
from registry.access.private_data import RatchetUnavailable, private_data_seen
from registry.access.rule_types import (
    HIDDEN,
    CallerRule,
    Explanation,
    Kind,
    Moment,
    Refusal,
    Stage,
    ToolFacts,
    ToolRecord,
    ToolRule,
)
from registry.servers.gateway_policy import GatewayMode, IsolationScope
from registry.servers.models import (
    PER_PERSON_MODES,
    ApprovalState,
    CircuitState,
    Health,
    ItemReview,
    McpServer,
    ReviewStatus,
    UpstreamAuth,
)
from registry.teams.callers import Caller, PersonIdentity
from registry.upstream.models import AccountState
from registry.upstream.services import broken_message, link_page_url, not_linked_message
from registry.upstream.tokens import UPSTREAM_ACCOUNT_BROKEN, UPSTREAM_ACCOUNT_NOT_LINKED

# Codes of a decision: `allowed`, or the code of the rule that refused.
ALLOWED = "allowed"
TOKEN_EXPIRED = "token_expired"  # noqa: S105 (a code, not a secret)
UNKNOWN_TOOL = "unknown_tool"
GRANT_EXPIRED = "grant_expired"
SERVER_UNAVAILABLE = "server_unavailable"
DEFINITION_CHANGED = "definition_changed"
TOOL_NOT_APPROVED = "tool_not_approved"
ROLE_FORBIDS = "role_forbids"
SERVER_UNHEALTHY = "server_unhealthy"
NOT_CALLABLE = "not_callable"
CIRCUIT_OPEN = "circuit_open"
PRIVATE_DATA_RATCHET = "private_data_ratchet"
# The cache could not say (or record) whether the caller read private data: refused, fail closed.
RATCHET_UNAVAILABLE = "ratchet_unavailable"
# A person's token acts only while they stand (the person_standing rule).
PERSON_INACTIVE = "person_inactive"
PERSON_NOT_MEMBER = "person_not_member"
ROLE_NOT_ALLOWED = "role_not_allowed"
AUTHORIZATION_REVOKED = "authorization_revoked"
# A per-person server acts as the person who calls (the upstream_account rule).
UPSTREAM_ACCOUNT_NEEDS_PERSON = "upstream_account_needs_person"


def unknown_tool_message(name: str) -> str:
    """What a caller reads for a tool it may not know exists (missing, not granted, removed)."""
    return f"No tool named '{name}' is in this team's catalogue."


def unknown_item_message(kind: str, name: str) -> str:
    """The same for a resource or a prompt (missing, hidden, or its server not granted whole)."""
    return f"No {kind} '{name}' is offered to this team."


# --- token: the caller's token is still valid (caller) --------------------------------------


def _token_refuse(caller: Caller, now: float) -> Refusal | None:
    if caller.expires_at is not None and caller.expires_at <= now:
        kind = "access" if isinstance(caller, PersonIdentity) else "agent"
        return Refusal(TOKEN_EXPIRED, f"The {kind} token has expired.")
    return None


# --- person_standing: a person's token acts only while the person stands (caller, live) -----


def _person_refuse(caller: Caller, now: float) -> Refusal | None:
    """A person's token (an app acting for them, docs/authentication.md) acts only while the
    person is active, still a member of the team, still allowed the role they consented to, and
    the app's authorization is not revoked. Agents pass. The facts come with the identity, read at
    the team's current version (registry.oauth.tokens): a warm call reads nothing more."""
    if not isinstance(caller, PersonIdentity):
        return None
    standing = caller.standing
    person = caller.person_name
    team = f"'{caller.team_slug}'" if caller.team_slug else "this team"
    if not standing.authorization_active:
        return Refusal(
            AUTHORIZATION_REVOKED,
            f"{person} revoked this app's access to {team} (or an admin did); sign in again.",
        )
    if not standing.active:
        return Refusal(PERSON_INACTIVE, f"{person}'s Toolroom account is deactivated.")
    if not standing.member:
        return Refusal(
            PERSON_NOT_MEMBER,
            f"{person} is no longer a member of {team}, so this app cannot act for them there.",
        )
    if not standing.role_allowed:
        return Refusal(
            ROLE_NOT_ALLOWED,
            f"{person}'s membership of {team} no longer allows the role '{caller.role_name}'; "
            "sign in again to choose another.",
        )
    return None


# --- grant: an active grant of the tool or its server applies to the role (catalogue, live) ---


def _grant_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if not facts.granted:
        if facts.kind != Kind.TOOL:
            return Refusal(UNKNOWN_TOOL, unknown_item_message(facts.kind, facts.name))
        return Refusal(UNKNOWN_TOOL, unknown_tool_message(facts.name))
    # The call table keeps a grant until the team's version moves at its expiry; a call in
    # between finds it lapsed here.
    if facts.access_ends_at is not None and facts.access_ends_at <= moment.now:
        return Refusal(GRANT_EXPIRED, f"The team's access to '{facts.name}' has expired.")
    return None


def _grant_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    at, role = record.at, record.role
    applying, other_roles, lapsed = record.applying, record.other_roles, record.lapsed
    ends = access_ends([grant.expires_at for grant in applying]) if applying else None
    facts: dict[str, Any] = {
        "grants": [grant_facts(g, at=at) for g in applying],
        "access_ends_at": iso(ends) if applying else None,
        "grants_for_other_roles": [grant_facts(g, at=at) for g in other_roles],
        "ended_grants": [grant_facts(g, at=at) for g in lapsed[:5]],
    }
    if refusal is None:
        what = "the whole server" if applying[0].tool_id is None else "this tool"
        until = f"until {ends.isoformat()}" if ends else "with no expiry"
        reason = f"The team holds an active grant of {what} for this role, {until}."
    elif other_roles:
        names = ", ".join(sorted({g.role.name for g in other_roles if g.role is not None}))
        reason = f"The team's grant covers the role(s) {names} only, not '{role.name}'."
    elif lapsed:
        reason = f"The team's grant {'was revoked' if lapsed[0].revoked_at else 'has expired'}."
    elif record.item is not None:
        reason = "The team holds no grant of the whole server (a tool's grant covers no item)."
    else:
        reason = "The team holds no grant of this tool or of its server."
    return Explanation(reason, facts)


# --- tool_offered: the server still offers the tool (catalogue) ------------------------------


def _offered_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if not facts.offered:
        return Refusal(UNKNOWN_TOOL, unknown_tool_message(facts.name))
    return None


def _offered_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    tool = record.tool
    if tool is None:
        return item_explanations.offered(record)
    facts = {"removed_at": iso(tool.removed_at), "last_seen_at": iso(tool.last_seen_at)}
    if refusal is not None:
        return Explanation("The server no longer offers this tool.", facts)
    return Explanation("The server offers the tool.", facts)


# --- server_review: the server is approved (catalogue) ---------------------------------------


def _review_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.review_status != ReviewStatus.APPROVED:
        label = ReviewStatus(facts.review_status).label.lower()
        return Refusal(
            SERVER_UNAVAILABLE,
            f"The server '{facts.server_slug}' is {label} in Toolroom: none of its tools can be "
            "called.",
        )
    return None


def _review_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    server = record.server
    facts = {
        "review_status": server.review_status,
        "review_note": server.review_note,
        "reviewed_at": iso(server.reviewed_at),
    }
    if refusal is not None:
        label = ReviewStatus(server.review_status).label.lower()
        return Explanation(f"The server '{server.slug}' is {label}.", facts)
    return Explanation("The server is approved.", facts)


# --- tool_approval: the tool's current definition is the approved one (catalogue) ------------


def _definition_matches(facts: ToolFacts) -> bool:
    return bool(facts.approved_definition_hash) and (
        facts.approved_definition_hash == facts.definition_hash
    )


def _approval_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.kind != Kind.TOOL:
        return _item_approval_refuse(facts)
    matches = _definition_matches(facts)
    if facts.approval_state == ApprovalState.APPROVED and matches:
        return None
    if facts.approval_state == ApprovalState.CHANGED or (
        facts.approved_definition_hash and not matches
    ):
        return Refusal(
            DEFINITION_CHANGED,
            f"The definition of '{facts.name}' changed since it was approved, so Toolroom refuses "
            "to call it until an admin reviews and approves the new definition.",
        )
    return Refusal(TOOL_NOT_APPROVED, f"'{facts.name}' is not approved for use (or was revoked).")


def _item_approval_refuse(facts: ToolFacts) -> Refusal | None:
    """A server's resource or prompt is offered only while an admin approved it at its current
    definition (docs/access.md, "Resources and prompts are approved one by one"). A hidden one
    reads like one never offered; one awaiting approval, or changed since, is refused."""
    if facts.approval_state == HIDDEN:
        return Refusal(UNKNOWN_TOOL, unknown_item_message(facts.kind, facts.name))
    matches = _definition_matches(facts)
    if facts.approval_state == ItemReview.APPROVED and matches:
        return None
    if facts.approved_definition_hash and not matches:
        return Refusal(
            DEFINITION_CHANGED,
            f"The {facts.kind} '{facts.name}' changed since it was approved, so Toolroom does not "
            "offer it until an admin reviews and approves the new definition.",
        )
    return Refusal(
        TOOL_NOT_APPROVED,
        f"The {facts.kind} '{facts.name}' is awaiting an admin's approval; Toolroom does not offer "
        "it until then.",
    )


def _approval_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    tool, approval = record.tool, record.approval
    if tool is None:
        return item_explanations.approval(record, refusal)
    matches = bool(tool.approved_definition_hash) and (
        tool.approved_definition_hash == tool.definition_hash
    )
    facts: dict[str, Any] = {
        "approval_state": tool.approval_state,
        "current_definition_hash": tool.definition_hash,
        "approved_definition_hash": tool.approved_definition_hash or None,
        "last_approved_definition_hash": approval.definition_hash if approval else None,
        "current_definition_matches": matches,
        "current_findings": len(tool.findings or []),
        "approval": None,
    }
    if approval is not None:
        facts["approval"] = {
            "definition_hash": approval.definition_hash,
            "approver": approval.approver_label,
            "approved_at": iso(approval.approved_at),
            "note": approval.note,
            "findings_acknowledged": len(approval.acknowledged_findings or []),
            "active": approval.ended_at is None,
            "ended_at": iso(approval.ended_at),
            "end_reason": approval.end_reason,
        }
    if refusal is None:
        reason = f"The current definition ({tool.definition_hash[:12]}) is the approved one."
    elif refusal.code == DEFINITION_CHANGED:  # a rug pull clears the pin: the last approval's
        was = tool.approved_definition_hash or facts["last_approved_definition_hash"] or "?"
        reason = (
            f"The definition changed since it was approved ({was[:12]}"
            f" approved, {tool.definition_hash[:12]} now): not the tool that was approved."
        )
    else:
        reason = f"The tool is {ApprovalState(tool.approval_state).label.lower()}."
    return Explanation(reason, facts)


# --- role_class: the role allows the tool's permission class (catalogue) ---------------------


def _role_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.permission_class not in facts.role_classes:
        allowed = ", ".join(facts.role_classes) or "no"
        return Refusal(
            ROLE_FORBIDS,
            f"The role '{facts.role_name}' may call {allowed} tools only; '{facts.name}' is a "
            f"{facts.permission_class} tool.",
        )
    return None


def _role_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    tool, role = record.tool, record.role
    if tool is None:
        return item_explanations.role_class(record, refusal)
    classes = role.permission_classes
    facts = {
        "tool_class": tool.permission_class,
        "derived_class": tool.permission_class_derived,
        "admin_override": tool.permission_class_override or None,
        "role_classes": classes,
    }
    override = " (set by an admin)" if tool.permission_class_override else ""
    if refusal is not None:
        reason = (
            f"The role '{role.name}' allows {', '.join(classes) or 'no'} tools; this is a "
            f"{tool.permission_class} tool{override}."
        )
        return Explanation(reason, facts)
    return Explanation(
        f"The role '{role.name}' allows {tool.permission_class} tools{override}.", facts
    )


# --- health: the server is not hidden for being unhealthy (catalogue) ------------------------


def server_health_and_circuit(server: McpServer) -> tuple[str, str]:
    """The server's health and circuit as the rules read them (no status row: unknown, closed)."""
    status = getattr(server, "status", None)
    if status is None:
        return Health.UNKNOWN, CircuitState.CLOSED
    return status.health or Health.UNKNOWN, status.circuit_state


def _health_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.health == Health.UNHEALTHY and facts.hide_unhealthy:
        return Refusal(
            SERVER_UNHEALTHY,
            f"The server '{facts.server_slug}' is unhealthy and hidden from the catalogue.",
        )
    return None


def _health_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    health, _ = server_health_and_circuit(record.server)
    status = getattr(record.server, "status", None)
    facts = {
        "health": health,
        "hide_unhealthy": record.hide_unhealthy,
        "last_checked_at": iso(status.last_checked_at) if status else None,
        "last_error": status.last_error if status else "",
    }
    if refusal is not None:
        reason = "The server is unhealthy and unhealthy servers are hidden from the catalogue."
        return Explanation(reason, facts)
    flagged = " (flagged unhealthy in the catalogue)" if health == Health.UNHEALTHY else ""
    return Explanation(f"Server health: {health}{flagged}.", facts)


# --- gateway_mode: the server is callable through the gateway (call) -------------------------


def _mode_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.gateway_mode == GatewayMode.NOT_CALLABLE:
        return Refusal(
            NOT_CALLABLE, f"The server '{facts.server_slug}' is not callable through the gateway."
        )
    return None


def _mode_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    policy, server = record.policy, record.server
    mode = policy.mode if policy else GatewayMode.ON_DEMAND
    facts = {
        "mode": str(mode),
        "isolation_scope": str(policy.isolation_scope if policy else IsolationScope.TEAM),
        "sandboxed": server.isolation == "sandbox",
        "pass_identity": policy.pass_identity if policy else False,
        "call_deadline_seconds": policy.call_deadline_seconds if policy else None,
    }
    if refusal is not None:
        return Explanation("The server is not callable through the gateway.", facts)
    return Explanation(f"Gateway mode: {GatewayMode(mode).label}.", facts)


# --- circuit: the server's circuit is not open (call) ----------------------------------------


def _circuit_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    if facts.circuit_state == CircuitState.OPEN:
        return Refusal(
            CIRCUIT_OPEN,
            f"The server '{facts.server_slug}' is failing its health checks (circuit open); "
            "calls are refused until it recovers.",
        )
    return None


def _circuit_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    _, circuit = server_health_and_circuit(record.server)
    status = getattr(record.server, "status", None)
    facts = {
        "circuit_state": circuit,
        "opened_at": iso(status.circuit_opened_at) if status else None,
    }
    if refusal is not None:
        reason = (
            "The server's circuit is open: calls are refused until a health check passes, or a "
            "probe call (one, after the open time) reaches the server."
        )
        return Explanation(reason, facts)
    return Explanation(f"Circuit {circuit}.", facts)


# --- private_data_ratchet: no connect-class tool after private data (call, live) -------------


def _ratchet_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    """The caller's token (and, for a person's, the person) read confidential or secret data
    within the team's window: connect-class tools are refused, in every session, conversation
    and way of calling, until the window has passed or the team's owner or an admin resets it."""
    if facts.permission_class != "connect" or moment.caller is None:
        return None
    try:
        seen = private_data_seen(moment.caller)
    except RatchetUnavailable:
        return Refusal(
            RATCHET_UNAVAILABLE,
            "Toolroom cannot read its private-data marks right now (its cache refuses), so it "
            f"refuses connect-class tools such as '{facts.name}' until it can.",
        )
    if seen is None:
        return None
    return Refusal(
        PRIVATE_DATA_RATCHET,
        f"This token has read confidential data (from '{seen}'), so Toolroom refuses "
        f"connect-class tools such as '{facts.name}' for it, in every conversation and session, "
        "to keep that data from leaving, until the team's window has passed or the team's owner "
        "resets it.",
        evidence=seen,
    )


def _ratchet_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    tool = record.tool
    if tool is None:
        return item_explanations.ratchet(record)
    applies = tool.permission_class == "connect"
    facts = {
        "applies_to_tool": applies,
        "data_sensitivity": tool.server.data_sensitivity,
        "caller_checked": record.caller is not None,
        "private_data_read_from": refusal.evidence if refusal is not None else None,
    }
    if refusal is not None and refusal.code == RATCHET_UNAVAILABLE:
        reason = "The private-data marks cannot be read now: connect-class tools are refused."
    elif refusal is not None:
        reason = (
            f"This token has read confidential data (from '{refusal.evidence}'): "
            "connect-class tools are refused until the team's window has passed or a reset."
        )
    elif not applies:
        reason = "Not a connect-class tool: the private-data ratchet never refuses it."
    elif record.caller is not None:
        reason = "This token has read no confidential data within the team's window."
    else:
        reason = (
            "A connect-class tool: refused to any token that has read confidential data within "
            "the team's window."
        )
    return Explanation(reason, facts)


def _upstream_refuse(facts: ToolFacts, moment: Moment) -> Refusal | None:
    """A server that acts as each person (docs/authentication.md, "Upstream accounts") takes a
    person's call with their linked account (or the secret they entered) only; an agent has no
    person upstream. The accounts come with the person's identity, read at the team's version
    (linking moves it)."""
    if facts.upstream_auth not in PER_PERSON_MODES or moment.caller is None:
        return None
    caller = moment.caller
    if not isinstance(caller, PersonIdentity):
        return Refusal(
            UPSTREAM_ACCOUNT_NEEDS_PERSON,
            f"'{facts.server_slug}' acts as each person with their own account there, and an "
            f"agent token has no person: call '{facts.name}' from a person's MCP client signed "
            "in to Toolroom (OAuth).",
        )
    state = caller.upstream_accounts.get(facts.server_slug)
    if state == AccountState.LINKED:
        return None
    if state == AccountState.BROKEN:
        return Refusal(
            UPSTREAM_ACCOUNT_BROKEN, broken_message(facts.server_slug, facts.upstream_auth)
        )
    return Refusal(
        UPSTREAM_ACCOUNT_NOT_LINKED, not_linked_message(facts.server_slug, facts.upstream_auth)
    )


def _upstream_explain(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    mode = record.server.upstream_auth
    facts = {"upstream_auth": mode}
    if mode == UpstreamAuth.PERSON_SECRET:
        return Explanation(
            "The server acts as each person: a person's call needs the token or API key they "
            f"entered ({link_page_url()}); agent tokens are refused.",
            facts,
        )
    if mode != UpstreamAuth.PERSON_OAUTH:
        return Explanation("The server uses its own shared credential: no account needed.", facts)
    return Explanation(
        "The server acts as each person: a person's call needs their linked account "
        f"({link_page_url()}); agent tokens are refused.",
        facts,
    )


# --- The list ---------------------------------------------------------------------------------

RULE_TOKEN = "token"  # noqa: S105 (a rule's name, not a secret)
RULE_PERSON_STANDING = "person_standing"
RULE_GRANT = "grant"
RULE_OFFERED = "tool_offered"
RULE_SERVER_REVIEW = "server_review"
RULE_APPROVAL = "tool_approval"
RULE_ROLE_CLASS = "role_class"
RULE_HEALTH = "health"
RULE_GATEWAY_MODE = "gateway_mode"
RULE_CIRCUIT = "circuit"
RULE_RATCHET = "private_data_ratchet"
RULE_UPSTREAM_ACCOUNT = "upstream_account"

# The order is the precedence: the first rule that refuses gives the call's code.
RULES: tuple[CallerRule | ToolRule, ...] = (
    CallerRule(RULE_TOKEN, live=True, refuse=_token_refuse),
    CallerRule(RULE_PERSON_STANDING, live=True, refuse=_person_refuse),
    ToolRule(RULE_GRANT, Stage.CATALOGUE, True, _grant_refuse, _grant_explain),
    ToolRule(RULE_OFFERED, Stage.CATALOGUE, False, _offered_refuse, _offered_explain),
    ToolRule(RULE_SERVER_REVIEW, Stage.CATALOGUE, False, _review_refuse, _review_explain),
    ToolRule(RULE_APPROVAL, Stage.CATALOGUE, False, _approval_refuse, _approval_explain),
    ToolRule(RULE_ROLE_CLASS, Stage.CATALOGUE, False, _role_refuse, _role_explain),
    ToolRule(RULE_HEALTH, Stage.CATALOGUE, False, _health_refuse, _health_explain),
    ToolRule(RULE_GATEWAY_MODE, Stage.CALL, False, _mode_refuse, _mode_explain),
    ToolRule(RULE_CIRCUIT, Stage.CALL, False, _circuit_refuse, _circuit_explain),
    ToolRule(RULE_RATCHET, Stage.CALL, True, _ratchet_refuse, _ratchet_explain),
    ToolRule(RULE_UPSTREAM_ACCOUNT, Stage.CALL, True, _upstream_refuse, _upstream_explain),
)

CALLER_RULES = tuple(rule for rule in RULES if isinstance(rule, CallerRule))
TOOL_RULES = tuple(rule for rule in RULES if isinstance(rule, ToolRule))
CATALOGUE_RULES = tuple(rule for rule in TOOL_RULES if rule.stage == Stage.CATALOGUE)
# What a call evaluates for a tool in the call table: the rest passed when the table was built.
CALL_TIME_RULES = tuple(rule for rule in TOOL_RULES if rule.live or rule.stage == Stage.CALL)


def caller_refusal(caller: Caller, now: float) -> Refusal | None:
    """The first caller rule's refusal (token expiry, a person's standing), or None: what the
    gateway's list and read handlers and the catalogue API ask before anything else."""
    for rule in CALLER_RULES:
        refusal = rule.refuse(caller, now)
        if refusal is not None:
            return refusal
    return None


def first_refusal(rules: tuple[ToolRule, ...], facts: ToolFacts, moment: Moment) -> Refusal | None:
    """The refusal of the first of these rules that refuses, in their order; None if all pass."""
    return next((found for rule in rules if (found := rule.refuse(facts, moment))), None)
