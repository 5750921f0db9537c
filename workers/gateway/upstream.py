"""The gateway's call path: check, reach the server under a deadline, record.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from registry.gateway import port
from registry.gateway.port import (
    ALLOWED,
    CIRCUIT_OPEN,
    CallDecision,
    Caller,
    CallOutcome,
    CallTarget,
    PersonIdentity,
    ToolCallRecord,
    arguments_digest,
    caller_record_fields,
    conversation_digest,
    identity_token,
    mcp_span,
    server_circuit_trip,
)
from workers.adapters.mcp_client import CallLog, McpFailure
from workers.gateway.attempts import UpstreamAttempts
from workers.gateway.breaker import (
    BREAKER_COOLDOWN_SECONDS,
    BREAKER_THRESHOLD,
    Breaker,
    ServerGate,
)
from workers.gateway.circuit_probe import probe_claim, probe_outcome
from workers.gateway.masking import SecretMask
from workers.gateway.outcomes import (
    BREAKING,
    DATABASE_UNAVAILABLE,
    FAILURE_CODES,
    SERVER_BUSY,
    TOOL_CALL,
    UPSTREAM_PROTOCOL,
    GatewayResult,
    Operation,
    ToolroomUnavailable,
    error_result,
)
from workers.gateway.person_tokens import PersonTokens, UpstreamUse, current_upstream_use
from workers.gateway.progress import (
    CallClock,
    Progress,
    current_caller_log,
    current_caller_progress,
    current_clock,
)
from workers.gateway.questions import (
    INPUT_NOT_CARRIED,
    INPUT_REQUIRED,
    REST_CANNOT_CARRY,
    CallQuestions,
    current_questions,
)
from workers.gateway.quotas import QuotaRefused, Quotas, quota_decision, quota_result
from workers.gateway.recorder import CallRecorder
from workers.gateway.registry_calls import cached_or_in_thread, in_thread
from workers.gateway.runtime_link import RuntimeRoute
from workers.gateway.upstream_sessions import isolation_key
from workers.session_pool import UpstreamPool

logger = logging.getLogger(__name__)

# Codes of `_reach` that refuse a call rather than report its failure.
REFUSALS = frozenset({CIRCUIT_OPEN, port.DEFINITION_CHANGED})

IDENTITY_META = "toolroom/identity"
IDENTITY_HEADER = "X-Toolroom-Identity"


class Gateway:
    """The call path of one gateway process."""

    def __init__(
        self, *, pool: UpstreamPool, recorder: CallRecorder, quotas: Quotas | None = None
    ) -> None:
        self.pool = pool
        self.recorder = recorder
        self.quotas = quotas  # None: no quotas (a gateway a test builds for itself)
        self.breakers: dict[int, Breaker] = {}
        self.gates: dict[int, ServerGate] = {}
        self.runtimes = RuntimeRoute(port.runtime_endpoint_secret())
        self.breaker_threshold = BREAKER_THRESHOLD
        self.breaker_cooldown = BREAKER_COOLDOWN_SECONDS
        self.mask = SecretMask()
        self.person_tokens = PersonTokens()
        self.attempts = UpstreamAttempts(
            pool=pool, runtimes=self.runtimes, person_tokens=self.person_tokens
        )

    def breaker(self, server_id: int) -> Breaker:
        breaker = self.breakers.get(server_id)
        if breaker is None:
            breaker = self.breakers[server_id] = Breaker(
                threshold=self.breaker_threshold, cooldown=self.breaker_cooldown
            )
        return breaker

    def _gate(self, target: CallTarget) -> ServerGate:
        gate = self.gates.get(target.server_id)
        if gate is None or gate.limit != target.policy.max_concurrency:
            gate = ServerGate(target.policy.max_concurrency)
            self.gates[target.server_id] = gate
        return gate

    async def call(
        self,
        *,
        identity: Caller,
        name: str,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        questions: CallQuestions | None = None,
        version: int | None = None,
        progress: Progress | None = None,
        log: CallLog | None = None,
    ) -> GatewayResult:
        """One tool call. `questions`: where a question the server asks mid-call goes (none:
        refused); `version` is the team's catalogue version read with the token check for this
        request, if it was (else the check reads it); `progress`: the caller's own channel for
        the server's progress reports, if it asked for them; `log`: its channel for the server's
        log messages of the call, if it asked for them. Counted against the team's and the
        caller's quotas first (refused with `quota_exceeded`, audited, when one is reached)."""
        started = time.time()
        clock = time.perf_counter()
        try:
            async with self._quota(identity, version):
                if log is None:
                    return await self._call(
                        identity, name, arguments, conversation, via, questions, version, progress
                    )
                logging_to = current_caller_log.set(log)
                try:
                    return await self._call(
                        identity, name, arguments, conversation, via, questions, version, progress
                    )
                finally:
                    current_caller_log.reset(logging_to)
        except QuotaRefused as exc:
            return self._quota_refused(
                exc, identity, name, version, arguments, conversation, via, started, clock
            )

    def _quota_refused(  # noqa: PLR0917 (what the refused call's record names)
        self,
        exc: QuotaRefused,
        identity: Caller,
        name: str,
        version: int | None,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        started: float,
        clock: float,
    ) -> GatewayResult:
        """A call or read refused by a quota: its result, recorded in the audit."""
        decision = quota_decision(identity, name, version, exc)
        result = quota_result(decision, exc)
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

    def _quota(self, identity: Caller, version: int | None) -> AbstractAsyncContextManager[None]:
        if self.quotas is None:
            return contextlib.nullcontext()
        return self.quotas.call(identity, version)

    async def _call(  # noqa: PLR0917 (the steps of `call` under its quota)
        self,
        identity: Caller,
        name: str,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        questions: CallQuestions | None,
        version: int | None,
        progress: Progress | None,
    ) -> GatewayResult:
        started = time.time()
        clock = time.perf_counter()
        try:
            decision = await cached_or_in_thread(
                port.call_check,
                identity=identity,
                name=name,
                arguments=arguments,
                version=version,
            )
        except port.DatabaseUnavailable as exc:
            decision = CallDecision(
                allowed=False,
                code=DATABASE_UNAVAILABLE,
                reasons=(str(exc),),
                name=name,
                team_id=identity.team_id,
                role_id=identity.role_id,
                version=version,
            )
        probe = await probe_claim(decision)
        if probe is not None:  # the shared circuit's half-open probe (it keeps `probe_target`)
            decision = dataclasses.replace(
                decision, allowed=True, code=ALLOWED, reasons=(), target=probe
            )
        if decision.code == DATABASE_UNAVAILABLE:
            result = GatewayResult(
                result=error_result(code=DATABASE_UNAVAILABLE, message=decision.message),
                outcome=CallOutcome.FAILED,
                code=DATABASE_UNAVAILABLE,
                decision=decision,
            )
        elif not decision.allowed or decision.target is None:
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
            progress_token = current_caller_progress.set(progress)
            try:
                result = await self._call_upstream(
                    decision, decision.target, identity, arguments, conversation, TOOL_CALL
                )
            finally:
                current_caller_progress.reset(progress_token)
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
        identity: Caller,
        entry: port.ContentEntry,
        name: str,
        op: Operation,
        conversation: str,
        content: port.AgentContent,
    ) -> GatewayResult:
        """A resource read or prompt: through the same quotas as a tool call, then the access
        rules (`content_refusal`: the catalogue rules' refusal kept with the list, the call rules
        now), then the same deadline, breaker, limit and pools as a call; audited either way."""
        started = time.time()
        clock = time.perf_counter()
        try:
            async with self._quota(identity, content.version):
                return await self._forward(identity, entry, name, op, conversation, content)
        except QuotaRefused as exc:
            return self._quota_refused(
                exc,
                identity,
                name,
                content.version,
                op.arguments or {},
                conversation,
                "mcp",
                started,
                clock,
            )

    async def _forward(  # noqa: PLR0917 (the steps of `forward` under its quota)
        self,
        identity: Caller,
        entry: port.ContentEntry,
        name: str,
        op: Operation,
        conversation: str,
        content: port.AgentContent,
    ) -> GatewayResult:
        started = time.time()
        clock = time.perf_counter()
        target = entry.target
        refusal = port.content_refusal(entry, identity=identity)
        decision = CallDecision(
            allowed=refusal is None,
            code=ALLOWED if refusal is None else refusal.code,
            reasons=() if refusal is None else (refusal.message,),
            name=name,
            target=target,
            team_id=identity.team_id,
            role_id=identity.role_id,
            version=content.version,
            server_slug=target.server_slug,
            ratchet_seconds=content.ratchet_seconds,
        )
        if refusal is not None:
            result = GatewayResult(
                result=error_result(
                    code=refusal.code, message=refusal.message, server=target.server_slug
                ),
                outcome=CallOutcome.REFUSED,
                code=refusal.code,
                decision=decision,
            )
        else:
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
        identity: Caller,
        arguments: Mapping[str, Any],
        conversation: str,
        op: Operation,
    ) -> GatewayResult:
        """The call upstream; a failure or an error result with the server's secrets masked, and
        which upstream account of the person it used (a per-person server)."""
        use = UpstreamUse(seen=(decision.team_id, decision.version)) if target.per_person else None
        reset = current_upstream_use.set(use)
        try:
            result = await self._reach(decision, target, identity, arguments, conversation, op)
        finally:
            current_upstream_use.reset(reset)
        if use is not None and use.account_id is not None:
            result = dataclasses.replace(
                result, upstream_account_id=use.account_id, upstream_subject=use.subject
            )
        if result.code in (ALLOWED, INPUT_REQUIRED) and not result.result.get("isError"):
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
        identity: Caller,
        arguments: Mapping[str, Any],
        conversation: str,
        op: Operation,
    ) -> GatewayResult:
        def failed(code: str, message: str) -> GatewayResult:
            return GatewayResult(
                result=error_result(
                    code=code, message=f"{target.server_slug}: {message}", server=target.server_slug
                ),
                outcome=CallOutcome.REFUSED if code in REFUSALS else CallOutcome.FAILED,
                code=code,
                decision=decision,
            )

        breaker = self.breaker(target.server_id)
        # The shared circuit's probe (workers.gateway.circuit_probe) goes whatever this process's
        # own breaker says; its outcome closes the shared circuit or keeps it open.
        probe = decision.allowed and decision.probe_target is not None
        if not probe and not breaker.admit(time.monotonic(), decision.version):
            return failed(
                CIRCUIT_OPEN,
                "the server failed its last calls (circuit open); calls are refused until a "
                f"probe succeeds, at most {breaker.cooldown:g} s from now.",
            )
        gate = self._gate(target)
        if gate.semaphore.locked() and gate.waiting >= target.policy.queue_limit:
            breaker.probing = False
            if probe:
                await probe_outcome(target, reached=False)
            return failed(
                SERVER_BUSY,
                f"the server is at its limit of {gate.limit} concurrent calls and "
                f"{target.policy.queue_limit} waiting; try again shortly.",
            )
        key = (
            target.server_id,
            isolation_key(
                target,
                team_id=identity.team_id,
                conversation=conversation,
                person_id=identity.person_id if isinstance(identity, PersonIdentity) else None,
            ),
        )
        # The call deadline, stretched by the server's progress up to its maximum.
        clock = CallClock(
            deadline=target.policy.call_deadline_seconds,
            maximum=target.policy.max_call_seconds,
            caller=current_caller_progress.get(),
        )
        end = time.monotonic() + clock.deadline  # for retries: the server's own time is the clock's
        failure: McpFailure | None = None
        reporting = current_clock.set(clock)
        try:
            with clock.scope:
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
                        result = await self.attempts.run(target, key, arguments, end, meta, op)
                finally:
                    gate.semaphore.release()
            if clock.scope.cancelled_caught:
                failure = McpFailure("timeout", clock.timeout_message())
        except McpFailure as exc:
            failure = exc
        except ToolroomUnavailable as exc:
            breaker.probing = False
            if probe:
                await probe_outcome(target, reached=False)
            return failed(exc.code, exc.message)
        finally:
            current_clock.reset(reporting)
        if probe:
            await probe_outcome(target, reached=failure is None or failure.kind not in BREAKING)
        if failure is not None:
            if failure.kind in BREAKING:
                if breaker.failure(time.monotonic(), decision.version):
                    await self._trip(target, failure)
            else:
                breaker.success()
        questions = current_questions.get()
        if questions is not None and failure is None and not result.get("isError"):
            questions.pending, questions.refused = None, ""  # the server went without: its word
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
            # The server asked what the caller cannot be asked, and failed or answered an error:
            # say why (a 2026-07-28 server's input_required ends the call with an error here).
            if failure is None:
                breaker.success()
            return failed(INPUT_NOT_CARRIED, questions.refusal())
        if failure is not None:
            return failed(FAILURE_CODES.get(failure.kind, UPSTREAM_PROTOCOL), failure.message)
        breaker.success()
        if target.is_private_data and not result.get("isError"):
            try:
                await cached_or_in_thread(
                    port.private_data_mark,
                    caller=identity,
                    server_slug=target.server_slug,
                    seconds=decision.ratchet_seconds or port.ratchet_window_seconds(None),
                )
            except port.RatchetUnavailable:  # fail closed: no private data without its mark
                logger.warning("could not mark a read of %s's private data", target.server_slug)
                return failed(
                    port.RATCHET_UNAVAILABLE,
                    "the result is withheld: Toolroom could not record that this token has read "
                    "confidential data (its cache refuses writes), so it cannot let the result "
                    "through.",
                )
        return GatewayResult(
            result=result,
            outcome=CallOutcome.TOOL_ERROR if result.get("isError") else CallOutcome.OK,
            code=ALLOWED,
            decision=decision,
        )

    async def _trip(self, target: CallTarget, failure: McpFailure) -> None:
        """Share an opened circuit with the health state (logged, never raised)."""
        try:
            await in_thread(server_circuit_trip, server_id=target.server_id, error=failure.message)
        except Exception:
            logger.exception("could not record the open circuit of %s", target.server_slug)

    def _identity_meta(
        self, decision: CallDecision, target: CallTarget, identity: Caller
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

    def _identity_token(self, decision: CallDecision, target: CallTarget, identity: Caller) -> str:
        if isinstance(identity, PersonIdentity):
            agent, person, client = identity.client_name, identity.person_name, identity.client_name
        else:
            agent, person, client = identity.name, "", ""
        return identity_token(
            token_id=identity.token_id,
            agent=agent,
            team_id=identity.team_id,
            team_slug=decision.team_slug,
            role=decision.role_name,
            tool=target.tool_name,
            server_slug=target.server_slug,
            person=person,
            client=client,
        )

    def _record(
        self,
        *,
        identity: Caller,
        decision: CallDecision,
        result: GatewayResult,
        arguments: Mapping[str, Any],
        conversation: str,
        via: str,
        started: float,
        clock: float,
    ) -> None:
        target = decision.target
        size, digest = arguments_digest(arguments)
        keep = target is not None and target.policy.keep_arguments
        self.recorder.add(
            ToolCallRecord(
                started_at=started,
                duration_ms=round((time.perf_counter() - clock) * 1000, 3),
                name=decision.name[:200],
                via=via,
                outcome=result.outcome,
                **{"role_name": decision.role_name, **caller_record_fields(identity)},
                server_id=target.server_id if target else None,
                server_slug=decision.server_slug,
                tool_name=target.tool_name if target else "",
                definition_hash=target.definition_hash if target else "",
                conversation=conversation_digest(conversation),
                error_class="" if result.code == ALLOWED else result.code,
                error=result.message,
                argument_bytes=size,
                argument_digest=digest,
                arguments=dict(arguments) if keep else None,
                upstream_account_id=result.upstream_account_id,
                upstream_subject=result.upstream_subject[:300],
            )
        )
