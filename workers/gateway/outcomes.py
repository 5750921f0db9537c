"""What a gateway call asks of a server and what it comes to: the operation, the result (an
error as a tool result that names the server and the cause) and the failure codes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.shared.dispatcher import ProgressFnT

from registry.gateway.port import CallDecision, CallTarget
from workers.adapters.mcp_client import Asker, CallLog, McpConnection

ERROR_META = "toolroom/error"

# Upstream failure codes (besides the refusal codes of registry.access.rules and the call check).
UPSTREAM_TIMEOUT = "upstream_timeout"
UPSTREAM_UNREACHABLE = "upstream_unreachable"
UPSTREAM_CLOSED = "upstream_closed"
UPSTREAM_PROTOCOL = "upstream_protocol_error"
SERVER_BUSY = "server_busy"
NOT_RUNNING = "server_not_running"
# Toolroom's own parts on the call path (not the server's fault).
BROKER_UNAVAILABLE = "broker_unavailable"
CACHE_UNAVAILABLE = "cache_unavailable"
DATABASE_UNAVAILABLE = "database_unavailable"

FAILURE_CODES = {
    "timeout": UPSTREAM_TIMEOUT,
    "connect": UPSTREAM_UNREACHABLE,
    "refused": UPSTREAM_UNREACHABLE,
    "spawn": UPSTREAM_UNREACHABLE,
    "closed": UPSTREAM_CLOSED,
    "protocol": UPSTREAM_PROTOCOL,
}
# Failures that prove the request never reached the tool.
NOT_REACHED = frozenset({"connect", "refused", "spawn"})
# Failures that count against the server's circuit.
BREAKING = frozenset({"connect", "refused", "spawn", "closed", "timeout"})


class ToolroomUnavailable(Exception):
    """A part of Toolroom the call needs (broker, cache) failed; `code` and `message` say which
    and why, for the caller."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Operation:
    """What to ask the server: a tool call (the default), a resource read or a prompt."""

    kind: str = "call_tool"  # call_tool | read_resource | get_prompt
    name: str = ""  # the server's resource URI or prompt name
    arguments: dict[str, Any] | None = None

    @property
    def method(self) -> str:
        """The MCP method this operation sends."""
        return {"read_resource": "resources/read", "get_prompt": "prompts/get"}.get(
            self.kind, "tools/call"
        )

    async def run(
        self,
        connection: McpConnection,
        target: CallTarget,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
        meta: dict[str, Any] | None,
        asker: Asker | None = None,
        progress: ProgressFnT | None = None,
        log: CallLog | None = None,
    ) -> dict[str, Any]:
        if self.kind == "read_resource":
            return await connection.read_resource(self.name, timeout=timeout)
        if self.kind == "get_prompt":
            return await connection.get_prompt(self.name, self.arguments, timeout=timeout)
        return await connection.call_tool(
            target.tool_name,
            arguments,
            timeout=timeout,
            meta=meta,
            asker=asker,
            progress=progress,
            log=log,
        )


TOOL_CALL = Operation()


@dataclass(frozen=True)
class GatewayResult:
    """What a call came to: the tool result in MCP wire form, and how it ended."""

    result: dict[str, Any]
    outcome: str  # registry.gateway.models.CallOutcome
    code: str  # "allowed", a refusal code, or an upstream failure code
    decision: CallDecision
    # A per-person server's call: which of the person's upstream accounts it used (never the
    # token): the account's id and the subject the upstream named, if it did.
    upstream_account_id: int | None = None
    upstream_subject: str = ""

    @property
    def message(self) -> str:
        meta = self.result.get("_meta", {}).get(ERROR_META, {})
        return str(meta.get("message", ""))


def error_result(*, code: str, message: str, server: str = "") -> dict[str, Any]:
    text = f"Toolroom: {message}"
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {ERROR_META: {"code": code, "server": server, "message": message}},
    }
