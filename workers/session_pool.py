"""Pooled sessions to MCP servers keyed by isolation, one owner task per session.

More: docs/workers.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
from anyio.abc import TaskGroup

from registry.servers.jobs.launch import LaunchPlan
from workers.adapters.mcp_client import (
    Deadlines,
    HttpTarget,
    McpConnection,
    McpFailure,
)
from workers.adapters.negotiation import connect_negotiated
from workers.definitions import DefinitionWatch, definition_changed
from workers.launch import session_mode, target_for

logger = logging.getLogger(__name__)
T = TypeVar("T")

CONNECT_DEADLINE = 10.0
_STOP = object()  # close now: calls in flight are cut off
_DRAIN = object()  # take no more calls, close once the calls in flight have ended


async def until_abandoned(
    fn: Callable[[McpConnection], Awaitable[T]],
    connection: McpConnection,
    future: asyncio.Future[T],
) -> T:
    """Run `fn` on the session until the caller stops waiting for `future` (it was cancelled:
    the client cancelled, or the call's deadline passed); then the request is cancelled, and the
    SDK tells the server (`notifications/cancelled`, or the 2026-07-28 stream closed)."""
    with anyio.CancelScope() as scope:
        future.add_done_callback(lambda done: scope.cancel() if done.cancelled() else None)
        return await fn(connection)
    raise McpFailure("closed", "The caller stopped waiting; the request was cancelled.")


@dataclass(eq=False)
class _Work:
    fn: Callable[[McpConnection], Awaitable[Any]]
    future: asyncio.Future[Any]
    started: bool = False  # its task ran: the request may have gone out


def _unsent(failure: McpFailure) -> McpFailure:
    """The failure of a call the session took but never sent: provably not reached (retryable)."""
    return McpFailure(
        "connect", f"the upstream session ended before the call was sent ({failure.message})"
    )


def _process_exited(connection: McpConnection) -> McpFailure:
    return McpFailure("closed", "The server process exited.", stderr_tail=connection.stderr_tail())


class UpstreamSession:
    """One open session to one server for one isolation key, owned by one task."""

    def __init__(
        self,
        pool: UpstreamPool,
        key: tuple[int, str],
        plan: LaunchPlan,
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.pool = pool
        self.auth = auth  # one person's own upstream token (a per-person server's session)
        self.key = key
        self.plan = plan
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.finished = asyncio.Event()
        self.failure: McpFailure | None = None
        self.last_used = time.monotonic()
        self.in_flight = 0
        self.serving: set[_Work] = set()  # the calls taken from the queue, not finished
        # name -> definition hash of the tools the server listed when this session opened (or
        # since, told they changed); None: not listed (no watch, or the server would not list).
        self.listed: dict[str, str] | None = None

    @property
    def alive(self) -> bool:
        return not self.finished.is_set()

    def definition_changed(self, tool: str, expected: str) -> bool:
        """Whether this session's server lists `tool` with another definition than `expected`
        (the one the call was allowed for): a rug pull seen on this session."""
        return definition_changed(self.listed, tool, expected)

    def _listed(self, hashes: dict[str, str]) -> None:
        self.listed = hashes

    async def request(self, fn: Callable[[McpConnection], Awaitable[T]]) -> T:
        """Run `fn` on the session inside its owner task; raises McpFailure if it cannot."""
        if self.finished.is_set():  # this call was not sent: retryable
            raise _unsent(self.failure or McpFailure("closed", "The upstream session is closed."))
        self.last_used = time.monotonic()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await self.queue.put(_Work(fn, future))
        return await future

    async def stop(self, *, drain: bool = False) -> None:
        await self.queue.put(_DRAIN if drain else _STOP)

    async def own(self) -> None:
        """Open, serve, close: everything on this one task."""
        try:
            target = await target_for(self.plan, isolation_key=self.key[1])
            if isinstance(target, HttpTarget) and self.pool.meta_headers:
                target = dataclasses.replace(target, meta_headers=self.pool.meta_headers)
            if isinstance(target, HttpTarget) and self.auth is not None:
                target = dataclasses.replace(target, auth=self.auth)
            deadlines = Deadlines(connect=CONNECT_DEADLINE, call=300.0)
            async with connect_negotiated(
                target,
                deadlines=deadlines,
                mode=session_mode(self.plan),
                watch_tools=(
                    self.pool.definitions.listener(self.plan, self.request, self._listed)
                    if self.pool.definitions is not None
                    else None
                ),
            ) as connection:
                if self.pool.definitions is not None:
                    # Checked before the first call goes out (docs/security.md, rug pull).
                    self.listed = await self.pool.definitions.opened(self.key[0], connection)
                self.ready.set()
                await self._serve(connection)
        except McpFailure as failure:
            self.failure = failure
        except Exception as exc:  # never let one server's session take the pool down
            logger.exception("upstream session %s crashed", self.key)
            self.failure = McpFailure("protocol", f"{type(exc).__name__}: {exc}")
        finally:
            self.finished.set()
            self.ready.set()  # wake waiters: they see `failure`
            self.pool.forget(self)
            ended = self.failure or McpFailure("closed", "The upstream session closed.")
            while not self.queue.empty():
                item = self.queue.get_nowait()
                if isinstance(item, _Work) and not item.future.done():
                    item.future.set_exception(_unsent(ended))
            # Calls cut off when the session died under them (their tasks were cancelled with
            # it) end now with why, not at their deadline; one whose task never ran was not sent.
            for work in list(self.serving):
                if not work.future.done():
                    work.future.set_exception(ended if work.started else _unsent(ended))
            self.serving.clear()

    async def _serve(self, connection: McpConnection) -> None:
        dead: list[McpFailure] = []

        async def handle(work: _Work) -> None:
            if connection.process_gone:  # died before this call went out: it is not sent
                if not work.future.done():
                    work.future.set_exception(_unsent(_process_exited(connection)))
                self.serving.discard(work)
                return
            work.started = True
            self.in_flight += 1
            try:
                result = await until_abandoned(work.fn, connection, work.future)
            except McpFailure as failure:
                if not work.future.done():
                    work.future.set_exception(failure)
                if failure.kind in ("closed", "connect"):
                    dead.append(failure)
                    await self.queue.put(_STOP)
            except Exception as exc:
                if not work.future.done():
                    work.future.set_exception(exc)
            else:
                if not work.future.done():
                    work.future.set_result(result)
            finally:
                self.in_flight -= 1
                if work.future.done():  # else cut off: `own` ends it with the session's failure
                    self.serving.discard(work)
                self.last_used = time.monotonic()

        watching = anyio.CancelScope()

        async def watch() -> None:
            """A local server's process exit (a sandboxed server's container exit) ends the
            session at once: it leaves the pool, and the scope's next call opens a new one."""
            with watching:
                await connection.wait_process_gone()
            if watching.cancel_called:
                return
            dead.append(_process_exited(connection))
            logger.info("upstream session %s ended: its server process exited", self.key)
            await self.queue.put(_STOP)

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            while True:
                item = await self.queue.get()
                if item is _STOP:
                    group.cancel_scope.cancel()
                    break
                if item is _DRAIN:
                    watching.cancel()
                    break  # the task group waits for the calls in flight
                self.serving.add(item)  # answered by `own` even if its task never runs
                group.start_soon(handle, item)
        if dead:
            self.failure = dead[0]


class UpstreamPool:
    """The upstream sessions of one gateway process."""

    def __init__(
        self,
        *,
        idle_seconds: float,
        meta_headers: Mapping[str, str] | None = None,
        definitions: DefinitionWatch | None = None,
    ) -> None:
        self.idle_seconds = idle_seconds
        # Each session's tools are checked when it opens and when the server says they changed.
        self.definitions = definitions
        self.meta_headers = dict(meta_headers or {})
        self.sessions: dict[tuple[int, str], UpstreamSession] = {}
        self._group: TaskGroup | None = None

    def attach(self, group: TaskGroup) -> None:
        """Owner tasks run in this task group (the gateway's lifespan)."""
        self._group = group
        group.start_soon(self._reap_idle)

    def forget(self, session: UpstreamSession) -> None:
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]

    async def session(
        self,
        key: tuple[int, str],
        plan: Callable[[], Awaitable[LaunchPlan]],
        auth: httpx2.Auth | None = None,
    ) -> tuple[UpstreamSession, bool]:
        """The live session for `key` (and whether it is new), opened now if there is none, once
        ready. `plan` loads the server's launch plan, only when a session must be opened; `auth`
        authorizes a new session's every request (a person's key: their own token).

        Raises McpFailure when it cannot be opened. The caller bounds the wait with its deadline.
        """
        session = self.sessions.get(key)
        fresh = False
        if session is None or not session.alive:
            if self._group is None:
                raise McpFailure("connect", "The gateway's upstream pool is not running.")
            loaded = await plan()
            session = self.sessions.get(key)  # another call may have opened it meanwhile
            if session is None or not session.alive:
                session = UpstreamSession(self, key, loaded, auth)
                self.sessions[key] = session
                fresh = True
                self._group.start_soon(session.own, name=f"upstream:{loaded.slug}:{key[1]}")
        await session.ready.wait()
        if session.finished.is_set():
            raise session.failure or McpFailure("closed", "The upstream session closed.")
        return session, fresh

    async def drop(
        self, key: tuple[int, str], session: UpstreamSession | None = None, *, drain: bool = False
    ) -> None:
        """Close the session of `key`; with `session`, only if it is still that one (calls that
        found a session dead all drop it, and must not drop the one another call reopened).
        With `drain` the calls in flight on it end as they will (the next calls open a new
        session at once); otherwise they are cut off."""
        current = self.sessions.get(key)
        if current is None or (session is not None and current is not session):
            return
        del self.sessions[key]
        await current.stop(drain=drain)

    async def drop_server(self, server_id: int) -> None:
        """Close every session of one server (it stopped, or moved to another worker)."""
        for key in [key for key in self.sessions if key[0] == server_id]:
            await self.drop(key)

    async def _reap_idle(self) -> None:
        while True:
            await anyio.sleep(min(30.0, self.idle_seconds / 2))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.in_flight == 0 and now - session.last_used > self.idle_seconds:
                    self.forget(session)
                    await session.stop()

    async def close(self) -> None:
        for session in list(self.sessions.values()):
            await session.stop()
        self.sessions.clear()
