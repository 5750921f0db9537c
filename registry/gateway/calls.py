"""The one function that decides whether an agent may call a tool now: `call_check`.

It answers a `CallDecision`: allowed or not, a machine-readable code, the reasons in words, and
what to call. Every rule is checked on every call: the token's expiry, the grant's expiry, the
role's permission classes, the server approved (not suspended, retired or rejected), the tool
approved at its *current* definition hash, the server callable through the gateway and its
circuit not open, the private-data ratchet of the conversation, and the arguments against the
approved input schema.

The allowed set is `catalogue_for_agent`'s (the same selector `tools/list` serves), extended with
the reasons a granted tool is not in it. That "call table" is kept per process and per
(team, role) and rebuilt only when the team's catalogue version moves: a warm call whose version
is unchanged makes no database query (the version is read from the cache). Every change that can
alter a decision bumps the version (see docs/catalogue.md), so a revoke, a suspension or a rug pull
is refused on the very next call.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.conf import settings
from django.db.models import Q

from registry.catalogue.naming import namespaced_tool_name
from registry.catalogue.selectors import UnknownRole, catalogue_for_agent
from registry.catalogue.versions import catalogue_state
from registry.core.cache import hot_cache
from registry.gateway.models import (
    DEFAULT_CALL_DEADLINE_SECONDS,
    DEFAULT_IDLE_STOP_SECONDS,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_QUEUE_LIMIT,
    GatewayMode,
    IsolationScope,
)
from registry.servers.models import ApprovalState, CircuitState, ReviewStatus, Tool
from registry.servers.policy import DataSensitivity
from registry.teams.models import Grant
from registry.teams.tokens import AgentIdentity

# Codes of a decision (`CallDecision.code`).
ALLOWED = "allowed"
TOKEN_EXPIRED = "token_expired"  # noqa: S105 (a code, not a secret)
UNKNOWN_TOOL = "unknown_tool"
SERVER_UNAVAILABLE = "server_unavailable"
DEFINITION_CHANGED = "definition_changed"
TOOL_NOT_APPROVED = "tool_not_approved"
ROLE_FORBIDS = "role_forbids"
SERVER_UNHEALTHY = "server_unhealthy"
GRANT_EXPIRED = "grant_expired"
NOT_CALLABLE = "not_callable"
CIRCUIT_OPEN = "circuit_open"
PRIVATE_DATA_RATCHET = "private_data_ratchet"
INVALID_ARGUMENTS = "invalid_arguments"

# How a refusal reads over plain HTTP (the REST call endpoint); others are 403.
REFUSAL_HTTP_STATUS = {
    UNKNOWN_TOOL: 404,
    INVALID_ARGUMENTS: 400,
    TOKEN_EXPIRED: 401,
    CIRCUIT_OPEN: 503,
}


def refusal_http_status(code: str) -> int:
    return REFUSAL_HTTP_STATUS.get(code, 403)


def rest_conversation_key(*, token_id: int, conversation: str) -> str:
    """The conversation of a REST call: the id the agent sends, scoped to its token; none else
    (plain REST calls keep no conversation, so the ratchet applies only where one is named)."""
    given = conversation.strip()[:200]
    return f"token:{token_id}:conversation:{given}" if given else ""


PRIVATE_SENSITIVITIES = frozenset({DataSensitivity.CONFIDENTIAL, DataSensitivity.SECRET})
RATCHET_SECONDS = 24 * 3600
# A stateless caller's conversation when it names none (token_conversation).
UNNAMED_CONVERSATION_PREFIX = "agent-recent:"
_TABLES_MAX = 4096


@dataclass(frozen=True)
class GatewayPolicy:
    mode: str = GatewayMode.ON_DEMAND
    isolation_scope: str = IsolationScope.TEAM
    call_deadline_seconds: float = DEFAULT_CALL_DEADLINE_SECONDS
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    idle_stop_seconds: int = DEFAULT_IDLE_STOP_SECONDS
    pass_identity: bool = False
    keep_arguments: bool = False


@dataclass(frozen=True)
class CallTarget:
    """What a call that is allowed goes to."""

    name: str  # the namespaced name the agent called
    server_id: int
    server_slug: str
    transport: str
    sandboxed: bool
    tool_id: int
    tool_name: str  # the upstream tool's own name
    definition_hash: str
    permission_class: str
    data_sensitivity: str
    input_schema: dict[str, Any]
    policy: GatewayPolicy
    circuit_open: bool
    access_expires_at: float | None  # POSIX seconds; None: never

    @property
    def is_remote(self) -> bool:
        return self.transport in ("streamable_http", "sse")

    @property
    def is_private_data(self) -> bool:
        return self.data_sensitivity in PRIVATE_SENSITIVITIES


@dataclass(frozen=True)
class CallDecision:
    allowed: bool
    code: str
    reasons: tuple[str, ...]
    name: str
    target: CallTarget | None = None
    team_id: int | None = None
    role_id: int | None = None
    version: int | None = None
    server_slug: str = ""
    team_slug: str = ""
    role_name: str = ""

    @property
    def message(self) -> str:
        return " ".join(self.reasons)


@dataclass(frozen=True)
class _Refusal:
    code: str
    reason: str
    server_slug: str


@dataclass
class CallTable:
    """Everything `call_check` needs for one team+role at one catalogue version."""

    version: int
    role_name: str
    permission_classes: tuple[str, ...]
    team_slug: str = ""
    targets: dict[str, CallTarget] = field(default_factory=dict)
    refusals: dict[str, _Refusal] = field(default_factory=dict)


_tables: dict[tuple[int, int], CallTable] = {}
_tables_lock = threading.Lock()
_validators: dict[str, Any] = {}


def _policy(row: Mapping[str, Any]) -> GatewayPolicy:
    if row["server__gateway_policy__mode"] is None:
        return GatewayPolicy()
    return GatewayPolicy(
        mode=row["server__gateway_policy__mode"],
        isolation_scope=row["server__gateway_policy__isolation_scope"],
        call_deadline_seconds=row["server__gateway_policy__call_deadline_seconds"],
        max_concurrency=row["server__gateway_policy__max_concurrency"],
        queue_limit=row["server__gateway_policy__queue_limit"],
        idle_stop_seconds=row["server__gateway_policy__idle_stop_seconds"],
        pass_identity=row["server__gateway_policy__pass_identity"],
        keep_arguments=row["server__gateway_policy__keep_arguments"],
    )


_ROW_FIELDS = (
    "pk",
    "name",
    "server_id",
    "server__slug",
    "server__transport",
    "server__isolation",
    "server__data_sensitivity",
    "server__review_status",
    "server__status__circuit_state",
    "approval_state",
    "approved_definition_hash",
    "definition_hash",
    "permission_class",
    "server__gateway_policy__mode",
    "server__gateway_policy__isolation_scope",
    "server__gateway_policy__call_deadline_seconds",
    "server__gateway_policy__max_concurrency",
    "server__gateway_policy__queue_limit",
    "server__gateway_policy__idle_stop_seconds",
    "server__gateway_policy__pass_identity",
    "server__gateway_policy__keep_arguments",
)


def _refusal_for(row: Mapping[str, Any], *, role_name: str, classes: tuple[str, ...]) -> _Refusal:
    """Why a tool the team holds a grant for is not in its catalogue."""
    slug = row["server__slug"]
    name = namespaced_tool_name(slug, row["name"])
    status = row["server__review_status"]
    if status != ReviewStatus.APPROVED:
        label = ReviewStatus(status).label.lower()
        return _Refusal(
            SERVER_UNAVAILABLE,
            f"The server '{slug}' is {label} in Toolroom: none of its tools can be called.",
            slug,
        )
    approved_hash = row["approved_definition_hash"]
    if row["approval_state"] == ApprovalState.CHANGED or (
        approved_hash and approved_hash != row["definition_hash"]
    ):
        return _Refusal(
            DEFINITION_CHANGED,
            f"The definition of '{name}' changed since it was approved, so Toolroom refuses "
            "to call it until an admin reviews and approves the new definition.",
            slug,
        )
    if row["approval_state"] != ApprovalState.APPROVED:
        return _Refusal(
            TOOL_NOT_APPROVED, f"'{name}' is not approved for use (or was revoked).", slug
        )
    if row["permission_class"] not in classes:
        allowed = ", ".join(classes) or "no"
        return _Refusal(
            ROLE_FORBIDS,
            f"The role '{role_name}' may call {allowed} tools only; '{name}' is a "
            f"{row['permission_class']} tool.",
            slug,
        )
    return _Refusal(
        SERVER_UNHEALTHY,
        f"The server '{slug}' is unhealthy and hidden from the catalogue.",
        slug,
    )


def call_table_build(*, team_id: int, role_id: int, version: int) -> CallTable:
    """The call table of a team+role: five queries, whatever the number of tools."""
    catalogue = catalogue_for_agent(team_id=team_id, role_id=role_id)
    classes = tuple(catalogue.permission_classes)
    visible = {tool.tool_id: tool for tool in catalogue.tools}
    grants = list(
        Grant.objects.active()
        .for_role(role_id)
        .filter(team_id=team_id)
        .values_list("server_id", "tool_id")
    )
    granted_servers = [server_id for server_id, tool_id in grants if tool_id is None]
    granted_tools = [tool_id for _, tool_id in grants if tool_id is not None]
    rows = list(
        Tool.objects.filter(removed_at__isnull=True)
        .filter(Q(server_id__in=granted_servers) | Q(pk__in=granted_tools))
        .order_by()
        .values(*_ROW_FIELDS)
    )
    table = CallTable(
        version=version,
        role_name=catalogue.role_name,
        permission_classes=classes,
        team_slug=catalogue.team_slug,
    )
    for row in rows:
        entry = visible.get(row["pk"])
        if entry is None:
            refusal = _refusal_for(row, role_name=catalogue.role_name, classes=classes)
            table.refusals[namespaced_tool_name(row["server__slug"], row["name"])] = refusal
            continue
        table.targets[entry.name] = CallTarget(
            name=entry.name,
            server_id=entry.server_id,
            server_slug=entry.server_slug,
            transport=row["server__transport"],
            sandboxed=row["server__isolation"] == "sandbox",
            tool_id=entry.tool_id,
            tool_name=entry.tool_name,
            definition_hash=entry.definition_hash,
            permission_class=entry.permission_class,
            data_sensitivity=row["server__data_sensitivity"],
            input_schema=entry.input_schema,
            policy=_policy(row),
            circuit_open=row["server__status__circuit_state"] == CircuitState.OPEN,
            access_expires_at=(
                entry.access_expires_at.timestamp() if entry.access_expires_at else None
            ),
        )
    return table


def call_tables_forget() -> None:
    """Drop the call tables kept in this process (tests, whose rollbacks reuse ids and versions)."""
    with _tables_lock:
        _tables.clear()


def call_table(*, team_id: int, role_id: int, version: int | None = None) -> CallTable:
    """The team+role's call table at its current version; no query while the version holds.

    `version`: the team's version the caller has just read (the gateway reads it once per call,
    with the token check); else it is read here."""
    if version is None:
        version = catalogue_state(team_id=team_id).version
    key = (team_id, role_id)
    table = _tables.get(key)
    if table is not None and table.version == version:
        return table
    table = call_table_build(team_id=team_id, role_id=role_id, version=version)
    with _tables_lock:
        if len(_tables) >= _TABLES_MAX:
            _tables.clear()
        current = _tables.get(key)
        if current is None or current.version <= version:
            _tables[key] = table
    return table


def _validator(target: CallTarget) -> Any:
    validator = _validators.get(target.definition_hash)
    if validator is None:
        schema = target.input_schema or {"type": "object"}
        validator = jsonschema.validators.validator_for(schema)(schema)
        if len(_validators) >= _TABLES_MAX:
            _validators.clear()
        _validators[target.definition_hash] = validator
    return validator


def arguments_error(target: CallTarget, arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with the arguments for this tool's approved input schema, or None."""
    try:
        error = jsonschema.exceptions.best_match(_validator(target).iter_errors(dict(arguments)))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the approved input schema is not valid JSON Schema ({exc.message})"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{error.message} (at '{where}')" if where else error.message


def _ratchet_key(conversation: str) -> str:
    return "gateway-ratchet:" + hashlib.sha256(conversation.encode()).hexdigest()[:32]


def conversation_private_data_seen(*, conversation: str) -> str | None:
    """The server whose confidential or secret data this conversation has read, if any."""
    if not conversation:
        return None
    value = hot_cache().get(_ratchet_key(conversation))
    return str(value) if value is not None else None


def token_conversation(token_id: int) -> str:
    """The conversation of a stateless caller that names none: its token, marked for a sliding
    window after each private read (docs/gateway.md, "Conversation key")."""
    return f"{UNNAMED_CONVERSATION_PREFIX}{token_id}"


def conversation_mark_private_data(*, conversation: str, server_slug: str) -> None:
    """Remember that the conversation has read private data (called after such a call).

    Every private read renews the mark: 24 hours for a session or a named conversation, the
    configured window for a token that names none, so the window slides from the last private
    read and never resets at a clock boundary."""
    if not conversation:
        return
    seconds = (
        settings.TOOLROOM_GATEWAY_CONVERSATION_WINDOW_SECONDS
        if conversation.startswith(UNNAMED_CONVERSATION_PREFIX)
        else RATCHET_SECONDS
    )
    hot_cache().set(_ratchet_key(conversation), server_slug, seconds)


def _refuse(code: str, reason: str, name: str, **extra: Any) -> CallDecision:
    return CallDecision(allowed=False, code=code, reasons=(reason,), name=name, **extra)


def call_check(
    *,
    identity: AgentIdentity,
    name: str,
    arguments: Mapping[str, Any] | None,
    conversation: str = "",
    at: float | None = None,
    version: int | None = None,
) -> CallDecision:
    """Whether the agent may call the tool `name` with these arguments now, and why not.

    `conversation` keys the private-data ratchet (docs/gateway.md says what it is per protocol).
    The token itself (hash, revocation) has been authenticated by the caller; its expiry is
    checked here too, with the same clock as the grant's. `version`: the team's catalogue version
    the caller read from the cache for this call (see `call_table`).
    """
    now = time.time() if at is None else at
    if identity.expires_at is not None and identity.expires_at <= now:
        return _refuse(TOKEN_EXPIRED, "The agent token has expired.", name)
    try:
        table = call_table(team_id=identity.team_id, role_id=identity.role_id, version=version)
    except UnknownRole:
        return _refuse(TOKEN_EXPIRED, "The agent token's role no longer exists.", name)
    scope: dict[str, Any] = {
        "team_id": identity.team_id,
        "role_id": identity.role_id,
        "version": table.version,
    }
    target = table.targets.get(name)
    if target is None:
        refusal = table.refusals.get(name)
        if refusal is None:
            return _refuse(
                UNKNOWN_TOOL,
                f"No tool named '{name}' is in this team's catalogue.",
                name,
                **scope,
            )
        return _refuse(refusal.code, refusal.reason, name, server_slug=refusal.server_slug, **scope)
    scope["server_slug"] = target.server_slug
    if target.access_expires_at is not None and target.access_expires_at <= now:
        return _refuse(GRANT_EXPIRED, f"The team's access to '{name}' has expired.", name, **scope)
    if target.policy.mode == GatewayMode.NOT_CALLABLE:
        return _refuse(
            NOT_CALLABLE,
            f"The server '{target.server_slug}' is not callable through the gateway.",
            name,
            **scope,
        )
    if target.circuit_open:
        return _refuse(
            CIRCUIT_OPEN,
            f"The server '{target.server_slug}' is failing its health checks (circuit open); "
            "calls are refused until it recovers.",
            name,
            **scope,
        )
    if target.permission_class == "connect":
        seen = conversation_private_data_seen(conversation=conversation)
        if seen is not None:
            return _refuse(
                PRIVATE_DATA_RATCHET,
                f"This conversation has read confidential data (from '{seen}'), so Toolroom "
                f"refuses connect-class tools such as '{name}' for the rest of it, to keep that "
                "data from leaving.",
                name,
                **scope,
            )
    problem = arguments_error(target, arguments or {})
    if problem is not None:
        return _refuse(
            INVALID_ARGUMENTS,
            f"The arguments for '{name}' do not match its approved input schema: {problem}",
            name,
            **scope,
        )
    return CallDecision(
        allowed=True,
        code=ALLOWED,
        reasons=(),
        name=name,
        target=target,
        team_id=identity.team_id,
        role_id=identity.role_id,
        version=table.version,
        server_slug=target.server_slug,
        team_slug=table.team_slug,
        role_name=table.role_name,
    )
