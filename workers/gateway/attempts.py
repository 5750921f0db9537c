"""Reaching the server for one call: a pooled session or a runtime worker, a dropped session
reopened once, safe failures retried with backoff, and a person's own upstream token."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types

from registry.gateway import port
from registry.gateway.port import CallTarget, UpstreamAccountUnusable
from workers.adapters.mcp_client import McpConnection, McpFailure
from workers.definitions import DefinitionChanged
from workers.gateway.outcomes import NOT_REACHED, Operation, ToolroomUnavailable
from workers.gateway.person_tokens import PersonTokens, current_upstream_use
from workers.gateway.progress import current_caller_log, current_clock
from workers.gateway.questions import current_questions
from workers.gateway.registry_calls import in_thread
from workers.gateway.runtime_link import RuntimeRoute, RuntimeWorkerGone
from workers.session_pool import UpstreamPool

RETRY_BACKOFF = (1.0, 2.0, 4.0)


def session_dropped(failure: McpFailure) -> bool:
    """Whether the server answered that it does not know the session (Streamable HTTP 404)."""
    return failure.code == types.INVALID_REQUEST and "session not found" in failure.message.lower()


class UpstreamAttempts:
    """The attempts of one call upstream, for one gateway process."""

    def __init__(
        self, *, pool: UpstreamPool, runtimes: RuntimeRoute, person_tokens: PersonTokens
    ) -> None:
        self.pool = pool
        self.runtimes = runtimes
        self.person_tokens = person_tokens

    async def run(  # noqa: PLR0917 (the steps of one call)
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
                if (
                    not target.is_remote
                    and failure.kind == "closed"
                    and not isinstance(failure, RuntimeWorkerGone)
                ):
                    # The server's process exited during the call (the runtime worker saw it
                    # at once): answered now, upstream_closed, not retried into the restart.
                    raise
                safe = failure.kind in NOT_REACHED or (
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
            return await self.runtimes.call(target, key, arguments, end, meta, op)

        async def plan() -> port.LaunchPlan:
            return await in_thread(port.server_launch_plan_by_id, server_id=target.server_id)

        auth = None
        if target.per_person:
            person = (target.server_id, int(key[1].split(":")[1]))
            await self._person_token(person, key)
            auth = self.person_tokens.auth(person)
        try:
            session, _ = await self.pool.session(key, plan, auth)
        except McpFailure as failure:
            if target.per_person:
                await self._person_refused(person, key, failure)
            if failure.kind != "closed":
                raise
            # The session could not be opened: the call itself was never sent.
            raise McpFailure(
                "connect", f"could not open a session ({failure.message})"
            ) from failure
        if op.kind == "call_tool" and session.definition_changed(
            target.tool_name, target.definition_hash
        ):
            # The session's server lists another definition than the one approved (seen when
            # it opened, or since, told its tools changed): refused, whatever the catalogue
            # this call was checked against still said (workers/definitions.py).
            refusal = DefinitionChanged(target.tool_name)
            raise ToolroomUnavailable(refusal.code, refusal.message)
        clock = current_clock.get()
        remaining = clock.remaining() if clock else max(0.05, end - time.monotonic())
        asker = current_questions.get()
        progress = clock.progress if clock else None
        log = current_caller_log.get()

        async def work(connection: McpConnection) -> dict[str, Any]:
            return await op.run(
                connection,
                target,
                arguments,
                timeout=remaining,
                meta=meta,
                asker=asker,
                progress=progress,
                log=log,
            )

        try:
            return await session.request(work)
        except McpFailure as failure:
            if target.per_person:
                await self._person_refused(person, key, failure)
            if session_dropped(failure):
                # Only that one, not one another call reopened since; the calls in flight on
                # it get their own 404 (they never reached the tool) and reopen too.
                await self.pool.drop(key, session, drain=True)
            raise

    async def _person_token(self, person: tuple[int, int], key: tuple[int, str]) -> None:
        """The person's token is at hand (fetched or refreshed), else the call ends saying why.
        The call's record learns which upstream account it used (`current_upstream_use`)."""
        use = current_upstream_use.get()
        try:
            token = await self.person_tokens.token(person, seen=use.seen if use else None)
        except UpstreamAccountUnusable as exc:
            await self.pool.drop(key)
            raise ToolroomUnavailable(exc.code, exc.message) from exc
        if use is not None:
            use.account_id = token.account_id or None
            use.subject = token.subject

    async def _person_refused(
        self, person: tuple[int, int], key: tuple[int, str], failure: McpFailure
    ) -> None:
        """A request of the person's session was refused for want of a usable token: say why
        (re-link) instead of the bare HTTP 401, and close that session."""
        unusable = self.person_tokens.failure(person)
        if unusable is None:
            return
        await self.pool.drop(key)
        raise ToolroomUnavailable(unusable.code, unusable.message) from failure
