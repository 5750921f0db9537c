"""The gateway process's one door into the registry: everything `workers/gateway/` may call.

The gateway process holds sessions and answers agents; every rule, query and write it needs is
one of the registry's functions named here (an import-linter contract in pyproject.toml holds
`workers.gateway` to this module). They are plain, synchronous functions: the gateway runs them
in its event loop while they need only the cache, and in a thread when they need the database.
docs/architecture.md, "The gateway's port", lists them by concern.
"""

from __future__ import annotations

from registry.access.private_data import (
    RatchetUnavailable,
    private_data_mark,
    ratchet_window_seconds,
    rest_conversation_key,
    token_conversation,
)
from registry.access.rules import (
    ALLOWED,
    CIRCUIT_OPEN,
    DEFINITION_CHANGED,
    RATCHET_UNAVAILABLE,
    UNKNOWN_TOOL,
    UPSTREAM_ACCOUNT_NEEDS_PERSON,
    caller_refusal,
)
from registry.catalogue.search import DEFAULT_SEARCH_LIMIT, MAX_QUERY_LENGTH, MAX_SEARCH_LIMIT
from registry.catalogue.versions import catalogue_state_cached
from registry.core.api_errors import api_error_body
from registry.core.cache import (
    catalogue_cache,
    database_degraded,
    degraded_marker,
    start_epoch_keeper,
)
from registry.core.client_address import scope_client_address
from registry.core.database_outage import (
    DATABASE_ERRORS,
    DatabaseUnavailable,
    database_away,
    database_circuit_open,
    database_down,
    database_refusal,
    database_status,
    database_trip,
    degraded_answer_counted,
)
from registry.core.json_input import LONE_SURROGATE_MESSAGE, json_has_lone_surrogate
from registry.core.process_cache import VersionedCache
from registry.core.secret_fields import secret_redact, secret_redact_in
from registry.core.task_queue import BrokerUnavailable
from registry.core.tracing import mcp_span
from registry.gateway.callers import (
    NO_TOKEN,
    NOT_A_TOKEN,
    CallerRefused,
    CheckedCaller,
    caller_check,
    caller_still_good,
)
from registry.gateway.checks import CallDecision, CallTarget, call_check, refusal_http_status
from registry.gateway.circuit_probe import (
    circuit_probe_claim,
    circuit_probe_failed,
    circuit_probe_passed,
)
from registry.gateway.content import (
    AgentContent,
    ContentEntry,
    agent_content,
    content_refusal,
    resource_lookup,
)
from registry.gateway.identity import identity_jwks, identity_token
from registry.gateway.listing import ToolsListDocument, team_catalogue_version, tools_list_document
from registry.gateway.models import CallOutcome
from registry.gateway.quotas import (
    QUOTA_EXCEEDED,
    QuotaLimits,
    quota_hit_audit,
    quota_key_prefix,
    quota_redis_url,
    quota_refusal_message,
    quota_subject,
    team_quota_limits,
)
from registry.gateway.result_formats import render_result, result_format_error
from registry.gateway.runtimes import (
    RuntimeAddressUnavailable,
    RuntimeLocation,
    runtime_endpoint_secret,
    server_runtime_demand,
    server_runtime_location,
)
from registry.gateway.search_mode import CALL_TOOL, FIND_TOOLS, search_mode_on, tools_find
from registry.gateway.secrets import server_secrets
from registry.gateway.services import (
    RECORD_BATCH_SIZE,
    ToolCallRecord,
    arguments_digest,
    caller_record_fields,
    conversation_digest,
    server_circuit_trip,
    tool_calls_record,
)
from registry.oauth.metadata import PRM_PATH, protected_resource_metadata, resource_metadata_url
from registry.servers.gateway_policy import IsolationScope
from registry.servers.jobs.drift import tool_definitions_drift
from registry.servers.jobs.launch import LaunchPlan, server_launch_plan_by_id
from registry.teams.callers import Caller, PersonIdentity, caller_key, caller_mark_used
from registry.teams.token_failures import token_failure_count
from registry.teams.tokens import token_hash
from registry.upstream.services import link_page_url as upstream_link_page_url
from registry.upstream.tokens import (
    UPSTREAM_ACCOUNT_BROKEN,
    UPSTREAM_ACCOUNT_NOT_LINKED,
    UpstreamAccountUnusable,
    UpstreamToken,
    upstream_access_token,
)

__all__ = [
    "ALLOWED",
    "CALL_TOOL",
    "CIRCUIT_OPEN",
    "DATABASE_ERRORS",
    "DEFAULT_SEARCH_LIMIT",
    "DEFINITION_CHANGED",
    "FIND_TOOLS",
    "LONE_SURROGATE_MESSAGE",
    "MAX_QUERY_LENGTH",
    "MAX_SEARCH_LIMIT",
    "NOT_A_TOKEN",
    "NO_TOKEN",
    "PRM_PATH",
    "QUOTA_EXCEEDED",
    "RATCHET_UNAVAILABLE",
    "RECORD_BATCH_SIZE",
    "UNKNOWN_TOOL",
    "UPSTREAM_ACCOUNT_BROKEN",
    "UPSTREAM_ACCOUNT_NEEDS_PERSON",
    "UPSTREAM_ACCOUNT_NOT_LINKED",
    "AgentContent",
    "BrokerUnavailable",
    "CallDecision",
    "CallOutcome",
    "CallTarget",
    "Caller",
    "CallerRefused",
    "CheckedCaller",
    "ContentEntry",
    "DatabaseUnavailable",
    "IsolationScope",
    "LaunchPlan",
    "PersonIdentity",
    "QuotaLimits",
    "RatchetUnavailable",
    "RuntimeAddressUnavailable",
    "RuntimeLocation",
    "ToolCallRecord",
    "ToolsListDocument",
    "UpstreamAccountUnusable",
    "UpstreamToken",
    "VersionedCache",
    "agent_content",
    "api_error_body",
    "arguments_digest",
    "call_check",
    "caller_check",
    "caller_key",
    "caller_mark_used",
    "caller_record_fields",
    "caller_refusal",
    "caller_still_good",
    "circuit_probe_claim",
    "circuit_probe_failed",
    "circuit_probe_passed",
    "content_refusal",
    "conversation_digest",
    "database_away",
    "database_circuit_open",
    "database_refusal",
    "database_trip",
    "degraded_answer_counted",
    "degraded_marker",
    "gateway_health",
    "identity_jwks",
    "identity_token",
    "json_has_lone_surrogate",
    "mcp_span",
    "private_data_mark",
    "protected_resource_metadata",
    "quota_hit_audit",
    "quota_key_prefix",
    "quota_redis_url",
    "quota_refusal_message",
    "quota_subject",
    "ratchet_window_seconds",
    "refusal_http_status",
    "render_result",
    "resource_lookup",
    "resource_metadata_url",
    "rest_conversation_key",
    "result_format_error",
    "runtime_endpoint_secret",
    "scope_client_address",
    "search_mode_on",
    "secret_redact",
    "secret_redact_in",
    "server_circuit_trip",
    "server_launch_plan_by_id",
    "server_runtime_demand",
    "server_runtime_location",
    "server_secrets",
    "start_epoch_keeper",
    "team_catalogue_version",
    "team_catalogue_version_cached",
    "team_quota_limits",
    "token_conversation",
    "token_failure_count",
    "token_hash",
    "tool_calls_record",
    "tool_definitions_drift",
    "tools_find",
    "tools_list_document",
    "upstream_access_token",
    "upstream_link_page_url",
]


def team_catalogue_version_cached(*, team_id: int) -> int | None:
    """The team's catalogue version if the cache holds it (never a query), else None."""
    state = catalogue_state_cached(team_id=team_id)
    return state.version if state is not None else None


def gateway_health() -> tuple[bool, dict[str, object]]:
    """Whether calls can succeed from this process now, and why: the database answers, or this
    process serves the last confirmed state within the outage window (`catalogue_cache()`
    confirms the epoch when that is due; during an outage it never waits for the database)."""
    try:
        cache = catalogue_cache()
    except DATABASE_ERRORS as exc:
        if database_away(exc):
            database_trip(exc)
        cache = None
    status = dict(database_status())
    if not database_down():
        database = "ok"
    elif database_degraded():
        database = "degraded"
    else:
        database = "failing"
    status["state"] = database
    return database != "failing", {
        "database": status,
        "cache": "ok" if cache is not None else "unavailable",
    }
