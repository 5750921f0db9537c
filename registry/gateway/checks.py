"""The one function that decides whether an agent may call a tool now: `call_check`.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema
from django.conf import settings
from django.db.models import Q

from registry.access.grant_facts import access_ends
from registry.access.private_data import PRIVATE_SENSITIVITIES, ratchet_window_seconds
from registry.access.rule_types import (
    Moment,
    Refusal,
    ToolFacts,
)
from registry.access.rules import (
    ALLOWED,
    CALL_TIME_RULES,
    CALLER_RULES,
    CATALOGUE_RULES,
    CIRCUIT_OPEN,
    NOT_CALLABLE,
    RATCHET_UNAVAILABLE,
    RULE_CIRCUIT,
    TOKEN_EXPIRED,
    UNKNOWN_TOOL,
    first_refusal,
    unknown_tool_message,
)
from registry.catalogue.naming import namespaced_tool_name
from registry.catalogue.selectors import UnknownRole
from registry.catalogue.versions import catalogue_state
from registry.core.process_cache import VersionedCache
from registry.servers.gateway_policy import (
    DEFAULT_CALL_DEADLINE_SECONDS,
    DEFAULT_IDLE_STOP_SECONDS,
    DEFAULT_MAX_CALL_SECONDS,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_QUEUE_LIMIT,
    GatewayMode,
    IsolationScope,
)
from registry.servers.models import PER_PERSON_MODES, CircuitState, Health, Tool
from registry.servers.tool_definitions import TASK_REQUIRED_REASON, TASK_SUPPORT
from registry.teams.callers import Caller
from registry.teams.models import Grant, TeamRole

# The call check's own code (the access rules' are in registry.access.rules).
INVALID_ARGUMENTS = "invalid_arguments"

# How a refusal reads over plain HTTP (the REST call endpoint); others are 403.
REFUSAL_HTTP_STATUS = {
    UNKNOWN_TOOL: 404,
    INVALID_ARGUMENTS: 400,
    TOKEN_EXPIRED: 401,
    CIRCUIT_OPEN: 503,
    RATCHET_UNAVAILABLE: 503,
}


def refusal_http_status(code: str) -> int:
    return REFUSAL_HTTP_STATUS.get(code, 403)


_TABLES_MAX = 4096


@dataclass(frozen=True)
class GatewayPolicy:
    mode: str = GatewayMode.ON_DEMAND
    isolation_scope: str = IsolationScope.TEAM
    call_deadline_seconds: float = DEFAULT_CALL_DEADLINE_SECONDS
    max_call_seconds: float = DEFAULT_MAX_CALL_SECONDS
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
    # person_oauth / person_secret: the call carries the person's own token or secret
    upstream_auth: str = "shared"
    circuit_opened_at: float | None = None  # POSIX seconds, while the shared circuit is open

    @property
    def per_person(self) -> bool:
        return self.upstream_auth in PER_PERSON_MODES

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
    ratchet_seconds: int = 0  # how long a private read marks the caller (the team's window)
    # A `circuit_open` refusal whose open time has passed, every other rule passing: where the
    # half-open probe goes if this call takes the probe's lease (registry.gateway.circuit_probe).
    probe_target: CallTarget | None = None

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
    """Everything `call_check` needs for one team+role at one catalogue version: for each tool the
    team holds a grant on, either what a call goes to and the facts its live and call-time rules
    read, or the refusal of the first catalogue rule that refused it."""

    version: int
    role_name: str
    permission_classes: tuple[str, ...]
    team_slug: str = ""
    ratchet_seconds: int = 0
    hide_unhealthy: bool = False
    # Servers granted whole to the role (what covers their resources and prompts): when access
    # through those grants ends (None: never).
    server_access: dict[int, float | None] = field(default_factory=dict)
    targets: dict[str, CallTarget] = field(default_factory=dict)
    facts: dict[str, ToolFacts] = field(default_factory=dict)
    refusals: dict[str, _Refusal] = field(default_factory=dict)


_tables: VersionedCache[tuple[int, int], CallTable] = VersionedCache(
    "call tables", limit=_TABLES_MAX
)
_validators: VersionedCache[str, Any] = VersionedCache("input validators", limit=_TABLES_MAX)


def gateway_policy_of(row: Mapping[str, Any]) -> GatewayPolicy:
    """The server's gateway policy from a row with the `server__gateway_policy__*` fields."""
    if row["server__gateway_policy__mode"] is None:
        return GatewayPolicy()
    return GatewayPolicy(
        mode=row["server__gateway_policy__mode"],
        isolation_scope=row["server__gateway_policy__isolation_scope"],
        call_deadline_seconds=row["server__gateway_policy__call_deadline_seconds"],
        max_call_seconds=row["server__gateway_policy__max_call_seconds"],
        max_concurrency=row["server__gateway_policy__max_concurrency"],
        queue_limit=row["server__gateway_policy__queue_limit"],
        idle_stop_seconds=row["server__gateway_policy__idle_stop_seconds"],
        pass_identity=row["server__gateway_policy__pass_identity"],
        keep_arguments=row["server__gateway_policy__keep_arguments"],
    )


_ROLE_FIELDS = (
    "name",
    "allows_read",
    "allows_write",
    "allows_connect",
    "team__slug",
    "team__ratchet_window_seconds",
)
_ROW_FIELDS = (
    "pk",
    "name",
    "input_schema",
    "server_id",
    "server__slug",
    "server__transport",
    "server__isolation",
    "server__upstream_auth",
    "server__data_sensitivity",
    "server__review_status",
    "server__status__health",
    "server__status__circuit_state",
    "server__status__circuit_opened_at",
    "approval_state",
    "approved_definition_hash",
    "definition_hash",
    "permission_class",
    "server__gateway_policy__mode",
    "server__gateway_policy__isolation_scope",
    "server__gateway_policy__call_deadline_seconds",
    "server__gateway_policy__max_call_seconds",
    "server__gateway_policy__max_concurrency",
    "server__gateway_policy__queue_limit",
    "server__gateway_policy__idle_stop_seconds",
    "server__gateway_policy__pass_identity",
    "server__gateway_policy__keep_arguments",
)


def call_table_build(*, team_id: int, role_id: int, version: int) -> CallTable:
    """The call table of a team+role: three queries (the role, its grants, the granted tools),
    whatever the number of tools."""
    found = TeamRole.objects.filter(pk=role_id, team_id=team_id).values_list(*_ROLE_FIELDS).first()
    if found is None:
        raise UnknownRole(role_id)
    role_name, allows_read, allows_write, allows_connect, team_slug, team_window = found
    classes = tuple(
        TeamRole(
            allows_read=allows_read, allows_write=allows_write, allows_connect=allows_connect
        ).permission_classes
    )
    # When each grant of the server (whole) and of the tool (alone) ends; None: never.
    server_grants: dict[int, list[float | None]] = {}
    tool_grants: dict[int, list[float | None]] = {}
    for server_id, tool_id, expires_at in (
        Grant.objects.active()
        .for_role(role_id)
        .filter(team_id=team_id)
        .values_list("server_id", "tool_id", "expires_at")
    ):
        ends = expires_at.timestamp() if expires_at is not None else None
        if tool_id is None:
            server_grants.setdefault(server_id, []).append(ends)
        else:
            tool_grants.setdefault(tool_id, []).append(ends)
    # Only offered tools: a removed one is refused as unknown, exactly like a name not fetched.
    rows = (
        Tool.objects.filter(removed_at__isnull=True)
        .filter(Q(server_id__in=list(server_grants)) | Q(pk__in=list(tool_grants)))
        .order_by()
        .values(*_ROW_FIELDS, task_support=TASK_SUPPORT)
    )
    table = CallTable(
        version=version,
        role_name=role_name,
        permission_classes=classes,
        team_slug=team_slug,
        ratchet_seconds=ratchet_window_seconds(team_window),
        hide_unhealthy=bool(settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY),
        server_access={server: access_ends(ends) for server, ends in server_grants.items()},
    )
    hide_unhealthy = table.hide_unhealthy
    moment = Moment(now=time.time())
    named = sorted((namespaced_tool_name(row["server__slug"], row["name"]), row) for row in rows)
    for name, row in named:
        expiries = [*server_grants.get(row["server_id"], []), *tool_grants.get(row["pk"], [])]
        facts = ToolFacts(
            name=name,
            server_slug=row["server__slug"],
            granted=True,
            access_ends_at=access_ends(expiries),
            offered=True,
            review_status=row["server__review_status"],
            approval_state=row["approval_state"],
            approved_definition_hash=row["approved_definition_hash"],
            definition_hash=row["definition_hash"],
            permission_class=row["permission_class"],
            role_name=role_name,
            role_classes=classes,
            health=row["server__status__health"] or Health.UNKNOWN,
            hide_unhealthy=hide_unhealthy,
            gateway_mode=row["server__gateway_policy__mode"] or GatewayMode.ON_DEMAND,
            circuit_state=row["server__status__circuit_state"] or CircuitState.CLOSED,
            upstream_auth=row["server__upstream_auth"],
        )
        refusal: Refusal | None = first_refusal(CATALOGUE_RULES, facts, moment)
        if refusal is not None:
            if refusal.code != UNKNOWN_TOOL:  # unknown reads like a name never granted
                table.refusals[name] = _Refusal(refusal.code, refusal.message, facts.server_slug)
            continue
        if row["task_support"] == "required":  # listed (and marked) in the catalogue
            table.refusals[name] = _Refusal(
                NOT_CALLABLE,
                f"The tool '{name}' is not callable through the gateway: {TASK_REQUIRED_REASON}.",
                facts.server_slug,
            )
            continue
        table.facts[name] = facts
        table.targets[name] = CallTarget(
            name=name,
            server_id=row["server_id"],
            server_slug=facts.server_slug,
            transport=row["server__transport"],
            sandboxed=row["server__isolation"] == "sandbox",
            tool_id=row["pk"],
            tool_name=row["name"],
            definition_hash=facts.definition_hash,
            permission_class=facts.permission_class,
            data_sensitivity=row["server__data_sensitivity"],
            input_schema=row["input_schema"] or {},
            policy=gateway_policy_of(row),
            circuit_open=facts.circuit_state == CircuitState.OPEN,
            access_expires_at=facts.access_ends_at,
            upstream_auth=facts.upstream_auth,
            circuit_opened_at=_timestamp(row["server__status__circuit_opened_at"]),
        )
    return table


def _timestamp(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def call_table(*, team_id: int, role_id: int, version: int | None = None) -> CallTable:
    """The team+role's call table at its current version; no query while the version holds.

    `version`: the team's version the caller has just read (the gateway reads it once per call,
    with the token check); else it is read here."""
    if version is None:
        version = catalogue_state(team_id=team_id).version
    key = (team_id, role_id)
    table = _tables.get(key, version)
    if table is None:
        table = call_table_build(team_id=team_id, role_id=role_id, version=version)
        _tables.put(key, table, version)
    return table


# Keywords that can declare properties outside the schema's own `properties`.
_COMPOSING = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "dependentSchemas")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The approved input schema as the gateway applies it: an argument it does not declare is
    refused unless the schema itself says what to do with others (`additionalProperties` or
    `unevaluatedProperties`, e.g. `true`). JSON Schema lets undeclared ones through by default,
    which let a `bcc` pass to a mail server whose approved tool had none (issue 26)."""
    if "additionalProperties" in schema or "unevaluatedProperties" in schema:
        return schema
    if any(keyword in schema for keyword in _COMPOSING):
        # Properties declared in a subschema count: only what none of them evaluated is extra.
        return {**schema, "unevaluatedProperties": False}
    return {**schema, "additionalProperties": False}


def _validator(target: CallTarget) -> Any:
    validator = _validators.get(target.definition_hash)
    if validator is None:
        schema = strict_schema(target.input_schema or {"type": "object"})
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )(schema)
        _validators.put(target.definition_hash, validator)
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


# What a half-open probe must pass: every call-time rule but the circuit's own.
_PROBE_RULES = tuple(rule for rule in CALL_TIME_RULES if rule.name != RULE_CIRCUIT)


def _probe_due(target: CallTarget, now: float) -> bool:
    """Whether the shared circuit has been open for its open time (the probe's lease decides
    which call goes, and keeps a failed probe's circuit open for another open time)."""
    opened = target.circuit_opened_at
    return opened is None or now - opened >= float(settings.TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS)


def _refuse(code: str, reason: str, name: str, **extra: Any) -> CallDecision:
    return CallDecision(allowed=False, code=code, reasons=(reason,), name=name, **extra)


def call_check(
    *,
    identity: Caller,
    name: str,
    arguments: Mapping[str, Any] | None,
    at: float | None = None,
    version: int | None = None,
) -> CallDecision:
    """Whether the agent may call the tool `name` with these arguments now, and why not.

    The private-data ratchet reads the caller's marks (docs/gateway.md). The token itself (hash,
    revocation) has been authenticated by the caller; its expiry is checked here too, with the
    same clock as the grant's. `version`: the team's catalogue version the caller read from the
    cache for this call (see `call_table`).
    """
    now = time.time() if at is None else at
    for caller_rule in CALLER_RULES:
        refused = caller_rule.refuse(identity, now)
        if refused is not None:
            return _refuse(refused.code, refused.message, name)
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
            return _refuse(UNKNOWN_TOOL, unknown_tool_message(name), name, **scope)
        return _refuse(refusal.code, refusal.reason, name, server_slug=refusal.server_slug, **scope)
    scope["server_slug"] = target.server_slug
    moment = Moment(now=now, caller=identity)
    refused = first_refusal(CALL_TIME_RULES, table.facts[name], moment)
    problem = arguments_error(target, arguments or {})
    if refused is not None:
        if (
            refused.code == CIRCUIT_OPEN
            and problem is None
            and _probe_due(target, now)
            and first_refusal(_PROBE_RULES, table.facts[name], moment) is None
        ):
            scope["probe_target"] = target
        return _refuse(refused.code, refused.message, name, **scope)
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
        ratchet_seconds=table.ratchet_seconds,
    )
