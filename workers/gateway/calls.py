"""The gateway's call path: check, reach the server under a deadline, record.

`Gateway.call` asks the registry's `call_check` (every rule, from the version-keyed cache), then
calls the tool upstream through the pool (HTTP servers) or the runtime worker that holds the
server (stdio and sandboxed servers), under the server's deadline, concurrency limit and circuit
breaker, retrying only where that is safe, and records the call in the audit buffer. Every
failure becomes a tool result with `isError: true` that names the server and the cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
from django.core.exceptions import ImproperlyConfigured, SynchronousOnlyOperation
from django.db import close_old_connections

from registry.core.tracing import mcp_span
from registry.gateway import calls as checks
from registry.gateway import runtimes
from registry.gateway.calls import CallDecision, CallTarget
from registry.gateway.identity import identity_token
from registry.gateway.models import CallOutcome, IsolationScope
from registry.gateway.services import ToolCallRecord, server_circuit_trip
from registry.servers.models import McpServer
from registry.servers.operations.launch import LaunchPlan, server_launch_plan
from registry.teams.tokens import AgentIdentity
from workers.adapters.mcp_client import Asker, McpConnection, McpFailure
from workers.gateway.masking import SecretMask
from workers.gateway.questions import (
    INPUT_NOT_CARRIED,
    INPUT_REQUIRED,
    REST_CANNOT_CARRY,
    CallQuestions,
    current_questions,
)
from workers.gateway.recorder import CallRecorder
from workers.gateway.runtime_link import RuntimeLink
from workers.session_pool import UpstreamPool

logger = logging.getLogger(__name__)
T = TypeVar("T")

ERROR_META = "toolroom/error"
IDENTITY_META = "toolroom/identity"
IDENTITY_HEADER = "X-Toolroom-Identity"
RETRY_BACKOFF = (1.0, 2.0, 4.0)
BREAKER_THRESHOLD = 5
BREAKER_COOLDOWN_SECONDS = 10.0
START_POLL_SECONDS = 0.1
DEMAND_SECONDS = 30.0

# Upstream failure codes (besides the refusal codes of registry.gateway.calls).
UPSTREAM_TIMEOUT = "upstream_timeout"
UPSTREAM_UNREACHABLE = "upstream_unreachable"
UPSTREAM_CLOSED = "upstream_closed"
UPSTREAM_PROTOCOL = "upstream_protocol_error"
SERVER_BUSY = "server_busy"
NOT_RUNNING = "server_not_running"

_FAILURE_CODES = {
    "timeout": UPSTREAM_TIMEOUT,
    "connect": UPSTREAM_UNREACHABLE,
    "refused": UPSTREAM_UNREACHABLE,
    "spawn": UPSTREAM_UNREACHABLE,
    "closed": UPSTREAM_CLOSED,
    "protocol": UPSTREAM_PROTOCOL,
}
# Failures that prove the request never reached the tool.
_NOT_REACHED = frozenset({"connect", "refused", "spawn"})
# Failures that count against the server's circuit.
_BREAKING = frozenset({"connect", "refused", "spawn", "closed", "timeout"})


async def in_thread(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run registry code (ORM, cache) off the event loop; drop stale connections after."""

    def call() -> T:
        try:
            return fn(**kwargs)
        finally:
            close_old_connections()

    return await anyio.to_thread.run_sync(call)


async def cached_or_in_thread(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run registry code that usually needs only the cache right here in the event loop; when it
    needs the database, Django refuses the first query (SynchronousOnlyOperation, raised before
    anything is sent) and the whole call is run again in a thread. The warm path thus costs no
    thread hop."""
    try:
        return fn(**kwargs)
    except SynchronousOnlyOperation:
        return await in_thread(fn, **kwargs)


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
    ) -> dict[str, Any]:
        if self.kind == "read_resource":
            return await connection.read_resource(self.name, timeout=timeout)
        if self.kind == "get_prompt":
            return await connection.get_prompt(self.name, self.arguments, timeout=timeout)
        return await connection.call_tool(
            target.tool_name, arguments, timeout=timeout, meta=meta, asker=asker
        )


TOOL_CALL = Operation()


@dataclass(frozen=True)
class GatewayResult:
    """What a call came to: the tool result in MCP wire form, and how it ended."""

    result: dict[str, Any]
    outcome: str  # registry.gateway.models.CallOutcome
    code: str  # "allowed", a refusal code, or an upstream failure code
    decision: CallDecision

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


class _Breaker:
    """A per-server circuit breaker in this process: opens after consecutive failures, lets one
    probe through after the cool-down (half-open), closes on a success. (The health checks'
    circuit, shared by every process, is in the call table: `CallTarget.circuit_open`.)"""

    def __init__(self, *, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.opened_at: float | None = None
        self.opened_version: int | None = None
        self.probing = False

    def admit(self, now: float, version: int | None) -> bool:
        """Whether a call may go; a catalogue version newer than the one the circuit opened at
        (the health check closed the shared circuit, for instance) allows the probe at once."""
        if self.opened_at is None:
            return True
        if self.probing:
            return False
        if now - self.opened_at < self.cooldown and version == self.opened_version:
            return False
        self.probing = True  # half-open: this call is the probe
        return True

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.probing = False

    def failure(self, now: float, version: int | None) -> bool:
        """Count a failure; True when this one opened the circuit."""
        self.failures += 1
        was_open = self.opened_at is not None
        self.probing = False
        if self.failures >= self.threshold or was_open:
            self.opened_at = now
            self.opened_version = version
            return not was_open
        return False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.probing else "open"


class _ServerGate:
    """A server's concurrency limit with a bounded queue of waiting calls."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.semaphore = asyncio.Semaphore(limit)
        self.waiting = 0


def session_dropped(failure: McpFailure) -> bool:
    """Whether the server answered that it does not know the session (Streamable HTTP 404)."""
    return failure.code == types.INVALID_REQUEST and "session not found" in failure.message.lower()


def isolation_key(target: CallTarget, *, team_id: int, conversation: str) -> str:
    scope = target.policy.isolation_scope
    if scope == IsolationScope.SHARED:
        return "shared"
    if scope == IsolationScope.CONVERSATION:
        return "conversation:" + hashlib.sha256(conversation.encode()).hexdigest()[:24]
    return f"team:{team_id}"


def _arguments_digest(arguments: Mapping[str, Any]) -> tuple[int, str]:
    raw = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str).encode()
    return len(raw), hashlib.sha256(raw).hexdigest()


def _load_plan(server_id: int) -> LaunchPlan:
    server = McpServer.objects.select_related("status").get(pk=server_id)
    return server_launch_plan(server=server)


class Gateway:
    """The call path of one gateway process."""

    def __init__(self, *, pool: UpstreamPool, recorder: CallRecorder) -> None:
        self.pool = pool
        self.recorder = recorder
        self.breakers: dict[int, _Breaker] = {}
        self.gates: dict[int, _ServerGate] = {}
        self.locations: dict[int, runtimes.RuntimeLocation] = {}
        self.links: dict[str, RuntimeLink] = {}
        self._demanded: dict[int, float] = {}
        self.secret = runtimes.runtime_endpoint_secret()
        self.breaker_threshold = BREAKER_THRESHOLD
        self.breaker_cooldown = BREAKER_COOLDOWN_SECONDS
        self.mask = SecretMask()

    def breaker(self, server_id: int) -> _Breaker:
        breaker = self.breakers.get(server_id)
        if breaker is None:
            breaker = self.breakers[server_id] = _Breaker(
                threshold=self.breaker_threshold, cooldown=self.breaker_cooldown
            )
        return breaker

    def _gate(self, target: CallTarget) -> _ServerGate:
        gate = self.gates.get(target.server_id)
        if gate is None or gate.limit != target.policy.max_concurrency:
            gate = _ServerGate(target.policy.max_concurrency)
            self.gates[target.server_id] = gate
        return gate

    async def call(
        self,
        *,
        identity: AgentIdentity,
        name: str,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        questions: CallQuestions | None = None,
        version: int | None = None,
    ) -> GatewayResult:
        """One tool call. `questions`: where a question the server asks mid-call goes (none:
        refused); `version` is the team's catalogue version read with the token check for this
        request, if it was (else the check reads it)."""
        started = time.time()
        clock = time.perf_counter()
        decision = await cached_or_in_thread(
            checks.call_check,
            identity=identity,
            name=name,
            arguments=arguments,
            conversation=conversation,
            version=version,
        )
        if not decision.allowed or decision.target is None:
            result = GatewayResult(
                result=error_result(
                    code=decision.code, message=decision.message, server=decision.server_slug
                ),
                outcome=CallOutcome.REFUSED,
                code=decision.code,
                decision=decision,
            )
        else:
            if questions is None:
                questions = CallQuestions(None, why_not=REST_CANNOT_CARRY if via == "rest" else "")
            token = current_questions.set(questions)
            try:
                result = await self._call_upstream(
                    decision, decision.target, identity, arguments, conversation, TOOL_CALL
                )
            finally:
                current_questions.reset(token)
        self._record(
            identity=identity,
            decision=decision,
            result=result,
            arguments=arguments,
            conversation=conversation,
            via=via,
            started=started,
            clock=clock,
        )
        return result

    async def forward(
        self,
        *,
        identity: AgentIdentity,
        target: CallTarget,
        name: str,
        op: Operation,
        conversation: str,
        version: int,
    ) -> GatewayResult:
        """A resource read or prompt of a server the agent may use (checked by the caller):
        through the same deadline, breaker, limit and pools as a tool call; audited."""
        started = time.time()
        clock = time.perf_counter()
        decision = CallDecision(
            allowed=True,
            code=checks.ALLOWED,
            reasons=(),
            name=name,
            target=target,
            team_id=identity.team_id,
            role_id=identity.role_id,
            version=version,
            server_slug=target.server_slug,
        )
        result = await self._call_upstream(decision, target, identity, {}, conversation, op)
        self._record(
            identity=identity,
            decision=decision,
            result=result,
            arguments=op.arguments or {},
            conversation=conversation,
            via="mcp",
            started=started,
            clock=clock,
        )
        return result

    async def _call_upstream(  # noqa: PLR0917 (private steps of one call)
        self,
        decision: CallDecision,
        target: CallTarget,
        identity: AgentIdentity,
        arguments: Mapping[str, Any],
        conversation: str,
        op: Operation,
    ) -> GatewayResult:
        """The call upstream; a failure or an error result with the server's secrets masked."""
        result = await self._reach(decision, target, identity, arguments, conversation, op)
        if result.code in (checks.ALLOWED, INPUT_REQUIRED) and not result.result.get("isError"):
            return result
        try:
            masked = await self.mask.result(target.server_id, decision.version, result.result)
        except Exception:  # fail closed: no unmasked upstream text without the secrets
            logger.exception("could not read the secrets of %s", target.server_slug)
            masked = error_result(
                code=result.code,
                message=f"{target.server_slug}: the call failed (the details are withheld: "
                "Toolroom could not check them for secrets).",
                server=target.server_slug,
            )
        return dataclasses.replace(result, result=masked)

    async def _reach(  # noqa: PLR0917 (private steps of one call)
        self,
        decision: CallDecision,
        target: CallTarget,
        identity: AgentIdentity,
        arguments: Mapping[str, Any],
        conversation: str,
        op: Operation,
    ) -> GatewayResult:
        def failed(code: str, message: str) -> GatewayResult:
            return GatewayResult(
                result=error_result(
                    code=code, message=f"{target.server_slug}: {message}", server=target.server_slug
                ),
                outcome=CallOutcome.FAILED if code != checks.CIRCUIT_OPEN else CallOutcome.REFUSED,
                code=code,
                decision=decision,
            )

        breaker = self.breaker(target.server_id)
        if not breaker.admit(time.monotonic(), decision.version):
            return failed(
                checks.CIRCUIT_OPEN,
                "the server failed its last calls (circuit open); calls are refused until a "
                f"probe succeeds, at most {breaker.cooldown:g} s from now.",
            )
        gate = self._gate(target)
        deadline = target.policy.call_deadline_seconds
        if gate.semaphore.locked() and gate.waiting >= target.policy.queue_limit:
            breaker.probing = False
            return failed(
                SERVER_BUSY,
                f"the server is at its limit of {gate.limit} concurrent calls and "
                f"{target.policy.queue_limit} waiting; try again shortly.",
            )
        key = (
            target.server_id,
            isolation_key(target, team_id=identity.team_id, conversation=conversation),
        )
        end = time.monotonic() + deadline
        failure: McpFailure | None = None
        try:
            with anyio.fail_after(deadline):
                gate.waiting += 1
                try:
                    await gate.semaphore.acquire()
                finally:
                    gate.waiting -= 1
                try:
                    with mcp_span(
                        op.method,
                        meta=self._identity_meta(decision, target, identity),
                        span_prefix="gateway",
                        attributes={
                            "toolroom.server": target.server_slug,
                            "mcp.subject": op.name or target.tool_name,
                        },
                    ) as meta:
                        result = await self._attempts(target, key, arguments, end, meta, op)
                finally:
                    gate.semaphore.release()
        except TimeoutError:
            failure = McpFailure(
                "timeout", f"no answer within the call deadline of {deadline:g} s."
            )
        except McpFailure as exc:
            failure = exc
        if failure is not None:
            if failure.kind in _BREAKING:
                if breaker.failure(time.monotonic(), decision.version):
                    await self._trip(target, failure)
            else:
                breaker.success()
        questions = current_questions.get()
        if questions is not None and questions.pending is not None and not questions.refused:
            # A 2026-07-28 caller is asked with input_required (the server got "retry later").
            if failure is None:
                breaker.success()
            return GatewayResult(
                result={"resultType": INPUT_REQUIRED},
                outcome=CallOutcome.OK,
                code=INPUT_REQUIRED,
                decision=decision,
            )
        if questions is not None and questions.refused:
            # The server asked what the caller cannot be asked: say so, whatever came of it
            # (a 2026-07-28 server's input_required ends the call with an error here).
            if failure is None:
                breaker.success()
            return failed(INPUT_NOT_CARRIED, questions.refusal())
        if failure is not None:
            return failed(_FAILURE_CODES.get(failure.kind, UPSTREAM_PROTOCOL), failure.message)
        breaker.success()
        if target.is_private_data and not result.get("isError"):
            await cached_or_in_thread(
                checks.conversation_mark_private_data,
                conversation=conversation,
                server_slug=target.server_slug,
            )
        return GatewayResult(
            result=result,
            outcome=CallOutcome.TOOL_ERROR if result.get("isError") else CallOutcome.OK,
            code=checks.ALLOWED,
            decision=decision,
        )

    async def _trip(self, target: CallTarget, failure: McpFailure) -> None:
        """Share an opened circuit with the health state (logged, never raised)."""
        try:
            await in_thread(server_circuit_trip, server_id=target.server_id, error=failure.message)
        except Exception:
            logger.exception("could not record the open circuit of %s", target.server_slug)

    def _identity_meta(
        self, decision: CallDecision, target: CallTarget, identity: AgentIdentity
    ) -> dict[str, Any] | None:
        """The caller's identity, signed, for a server whose policy asks for it."""
        if not target.policy.pass_identity:
            return None
        try:
            return {IDENTITY_META: self._identity_token(decision, target, identity)}
        except ImproperlyConfigured as exc:
            raise McpFailure(
                "protocol",
                f"Toolroom cannot sign the caller's identity this server asks for: {exc}",
            ) from exc

    def _identity_token(
        self, decision: CallDecision, target: CallTarget, identity: AgentIdentity
    ) -> str:
        return identity_token(
            token_id=identity.token_id,
            agent=identity.name,
            team_id=identity.team_id,
            team_slug=decision.team_slug,
            role=decision.role_name,
            tool=target.tool_name,
            server_slug=target.server_slug,
        )

    async def _attempts(  # noqa: PLR0917 (private steps of one call)
        self,
        target: CallTarget,
        key: tuple[int, str],
        arguments: Mapping[str, Any],
        end: float,
        meta: dict[str, Any] | None,
        op: Operation,
    ) -> dict[str, Any]:
        """Call, reopening a dropped session once and retrying with backoff where safe."""
        retries = 0
        reopened = False
        while True:
            # A session already in the pool may have died since its last call: reopening it at
            # once is not a retry. A session this attempt opens gets the backoff.
            live = self.pool.sessions.get(key)
            pooled = not target.is_remote or (live is not None and live.alive)
            try:
                return await self._once(target, key, arguments, end, meta, op)
            except McpFailure as failure:
                if session_dropped(failure) and not reopened:
                    # The server forgot the session (restarted, expired it): HTTP 404, the
                    # request never reached the tool. Open a new session, once (`_once`
                    # dropped the dead one).
                    reopened = True
                    continue
                safe = failure.kind in _NOT_REACHED or (
                    target.permission_class == "read" and failure.kind == "closed"
                )
                if not safe:
                    raise
                if pooled and not reopened and failure.kind in ("closed", "connect"):
                    reopened = True  # the session was dropped: reopen it once, at once
                    continue
                if retries >= len(RETRY_BACKOFF):
                    raise
                pause = RETRY_BACKOFF[retries]
                if time.monotonic() + pause >= end:
                    raise
                retries += 1
                await anyio.sleep(pause)

    async def _once(  # noqa: PLR0917 (private steps of one call)
        self,
        target: CallTarget,
        key: tuple[int, str],
        arguments: Mapping[str, Any],
        end: float,
        meta: dict[str, Any] | None,
        op: Operation,
    ) -> dict[str, Any]:
        if not target.is_remote:
            return await self._through_runtime(target, key, arguments, end, meta, op)

        async def plan() -> LaunchPlan:
            return await in_thread(_load_plan, server_id=target.server_id)

        try:
            session, _ = await self.pool.session(key, plan)
        except McpFailure as failure:
            if failure.kind != "closed":
                raise
            # The session could not be opened: the call itself was never sent.
            raise McpFailure(
                "connect", f"could not open a session ({failure.message})"
            ) from failure
        remaining = max(0.05, end - time.monotonic())
        asker = current_questions.get()

        async def work(connection: McpConnection) -> dict[str, Any]:
            return await op.run(
                connection, target, arguments, timeout=remaining, meta=meta, asker=asker
            )

        try:
            return await session.request(work)
        except McpFailure as failure:
            if session_dropped(failure):
                # Only that one, not one another call reopened since; the calls in flight on
                # it get their own 404 (they never reached the tool) and reopen too.
                await self.pool.drop(key, session, drain=True)
            raise

    async def _through_runtime(  # noqa: PLR0917 (private steps of one call)
        self,
        target: CallTarget,
        key: tuple[int, str],
        arguments: Mapping[str, Any],
        end: float,
        meta: dict[str, Any] | None,
        op: Operation,
    ) -> dict[str, Any]:
        """A stdio or sandboxed server: through the private endpoint of the runtime worker that
        holds it, started on demand (the call waits for it within its deadline)."""
        server_id = target.server_id
        location = self.locations.get(server_id)
        if location is None or not location.running:
            location = await in_thread(runtimes.server_runtime_location, server_id=server_id)
        if not location.running:
            await in_thread(
                runtimes.server_runtime_demand,
                server_id=server_id,
                idle_stop_seconds=target.policy.idle_stop_seconds,
                start=True,
            )
            self._demanded[server_id] = time.monotonic()
            # Sent as soon as a runtime worker has claimed the server: it opens the call's
            # per-team or per-conversation session while the server's own session starts.
            while not location.reachable:
                if time.monotonic() + START_POLL_SECONDS >= end:
                    raise McpFailure(
                        "timeout",
                        "the server is not running and did not start within the call deadline "
                        "(it is starting now: try again shortly).",
                    )
                await anyio.sleep(START_POLL_SECONDS)
                location = await in_thread(runtimes.server_runtime_location, server_id=server_id)
        elif time.monotonic() - self._demanded.get(server_id, 0.0) >= DEMAND_SECONDS:
            # Keep an on-demand server warm while it is used (written at most twice a minute).
            self._demanded[server_id] = time.monotonic()
            await in_thread(
                runtimes.server_runtime_demand,
                server_id=server_id,
                idle_stop_seconds=target.policy.idle_stop_seconds,
                start=False,
            )
        if location.running:
            self.locations[server_id] = location  # a starting one is looked up again
        assert location.address is not None  # noqa: S101 (reachable implies an address)
        link = self.links.get(location.address)
        if link is None:
            link = self.links[location.address] = RuntimeLink(location.address, self.secret)
        try:
            return await link.call(
                {
                    "server_id": server_id,
                    "scope": key[1],
                    "tool": target.tool_name,
                    "arguments": dict(arguments),
                    "timeout": max(0.05, end - time.monotonic()),
                    "meta": meta or {},
                    "op": op.kind,
                    "name": op.name,
                    "op_arguments": op.arguments or {},
                },
                asker=current_questions.get(),
            )
        except McpFailure as failure:
            if failure.kind in ("connect", "closed"):
                self.locations.pop(server_id, None)  # look it up again on the next attempt
            raise

    def _record(
        self,
        *,
        identity: AgentIdentity,
        decision: CallDecision,
        result: GatewayResult,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        started: float,
        clock: float,
    ) -> None:
        target = decision.target
        size, digest = _arguments_digest(arguments)
        keep = target is not None and target.policy.keep_arguments
        self.recorder.add(
            ToolCallRecord(
                started_at=started,
                duration_ms=round((time.perf_counter() - clock) * 1000, 3),
                name=decision.name[:200],
                via=via,
                outcome=result.outcome,
                token_id=identity.token_id,
                token_name=identity.name,
                team_id=identity.team_id,
                server_id=target.server_id if target else None,
                server_slug=decision.server_slug,
                tool_name=target.tool_name if target else "",
                definition_hash=target.definition_hash if target else "",
                conversation=hashlib.sha256(conversation.encode()).hexdigest()[:32]
                if conversation
                else "",
                error_class="" if result.code == checks.ALLOWED else result.code,
                error=result.message,
                argument_bytes=size,
                argument_digest=digest,
                arguments=dict(arguments) if keep else None,
            )
        )
