"""The gateway's side of the runtime workers (workers/runtime_endpoint.py): where a stdio or
sandboxed server runs, starting it on demand, and one persistent connection per runtime worker
with many calls in flight on it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Coroutine, Mapping
from typing import Any, get_args

import anyio

from registry.gateway import port
from registry.gateway.port import CallTarget
from workers.adapters.askers import ELICIT
from workers.adapters.mcp_client import Asker, AskRefused, CallLog, FailureKind, McpFailure
from workers.gateway.outcomes import (
    BROKER_UNAVAILABLE,
    CACHE_UNAVAILABLE,
    Operation,
    ToolroomUnavailable,
)
from workers.gateway.progress import Progress, current_caller_log, current_clock
from workers.gateway.questions import current_questions
from workers.gateway.registry_calls import in_thread
from workers.runtime_endpoint import MAX_LINE_BYTES, encode

START_POLL_SECONDS = 0.1
DEMAND_SECONDS = 30.0
NOTIFICATIONS_WAIT_SECONDS = 2.0

_KINDS = frozenset(get_args(FailureKind))


class RuntimeWorkerGone(McpFailure):
    """The runtime worker's connection ended (not the server's process): another attempt may
    reach the server through another worker."""


class RuntimeLink:
    def __init__(self, address: str, secret: bytes) -> None:
        self.address = address
        self.secret = secret.hex()
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.askers: dict[int, Asker] = {}  # who answers the questions of a call in flight
        self.progress: dict[int, Progress] = {}  # where a call's progress reports go
        self.logs: dict[int, CallLog] = {}  # where a call's log messages go (if asked for)
        self.asking: set[asyncio.Task[None]] = set()
        # The last notification (progress, log) of each call in flight: each one waits for the one
        # before, and the call's answer waits for the last, so that the caller hears them in the
        # order the server sent them and before the answer (on a 2026-07-28 request's own stream,
        # anything after the answer is lost).
        self.notified: dict[int, asyncio.Task[None]] = {}
        self.writer: asyncio.StreamWriter | None = None
        self.reader_task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self.lock:
            if self.writer is not None and not self.writer.is_closing():
                return self.writer
            host, _, port = self.address.rpartition(":")
            try:
                reader, writer = await asyncio.open_connection(
                    host, int(port), limit=MAX_LINE_BYTES
                )
            except OSError as exc:
                raise McpFailure(
                    "connect", f"the runtime worker at {self.address} is not reachable ({exc})."
                ) from exc
            writer.write(encode({"auth": self.secret}))
            self.writer = writer
            self.reader_task = asyncio.create_task(self._read(reader, writer))
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                if "ask" in message:  # the server asks a question during the call
                    task = asyncio.create_task(self._answer(writer, message))
                    self.asking.add(task)
                    task.add_done_callback(self.asking.discard)
                    continue
                if "progress" in message:  # the server reports progress of the call
                    report = self.progress.get(message.get("id"))
                    if report is not None:
                        self._notify(message["id"], self._report(report, message["progress"]))
                    continue
                if "log" in message:  # a log message of the call, for a caller who asked
                    sink = self.logs.get(message.get("id"))
                    if sink is not None:
                        self._notify(message["id"], self._log(sink, message["log"]))
                    continue
                future = self.pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.writer is writer:
                self.writer = None
            failure = RuntimeWorkerGone(
                "closed", f"the runtime worker at {self.address} went away."
            )
            for future in list(self.pending.values()):
                if not future.done():
                    future.set_exception(failure)
            self.pending.clear()

    def _notify(self, request_id: int, delivery: Coroutine[Any, Any, None]) -> None:
        """Deliver one notification of a call after the call's earlier ones."""
        previous = self.notified.get(request_id)

        async def in_order() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            await delivery

        task = asyncio.create_task(in_order())
        self.notified[request_id] = task
        self.asking.add(task)
        task.add_done_callback(self.asking.discard)

    async def _notifications_delivered(self, request_id: int) -> None:
        """Wait (briefly: a caller's stalled stream must not hold the answer) until the call's
        notifications so far have reached the caller."""
        last = self.notified.pop(request_id, None)
        if last is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(last), NOTIFICATIONS_WAIT_SECONDS)

    async def _answer(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        asker = self.askers.get(message.get("id"))  # type: ignore[arg-type]
        reply: dict[str, Any] = {"answer": message["ask"]}
        try:
            if asker is None:
                raise AskRefused("The call that asked is no longer in flight.")
            # A worker that predates sampling and roots sends only elicitation, without "method".
            method = str(message.get("method") or ELICIT)
            reply["result"] = await asker(method, dict(message.get("params") or {}))
        except AskRefused as exc:
            reply["refused"] = str(exc)
        except Exception as exc:  # the caller's client failed to answer
            reply["refused"] = f"The caller could not answer: {exc}"
        with contextlib.suppress(ConnectionError):
            writer.write(encode(reply))
            await writer.drain()

    @staticmethod
    async def _report(report: Progress, params: dict[str, Any]) -> None:
        total, message = params.get("total"), params.get("message")
        await report(
            float(params.get("progress") or 0),
            float(total) if total is not None else None,
            str(message) if message is not None else None,
        )

    @staticmethod
    async def _log(sink: CallLog, params: dict[str, Any]) -> None:
        level = str(params.get("level") or "info")
        if sink.wants(level):
            logger_name = params.get("logger")
            await sink.send(level, params.get("data"), str(logger_name) if logger_name else None)

    async def call(
        self,
        request: dict[str, Any],
        asker: Asker | None = None,
        progress: Progress | None = None,
        log: CallLog | None = None,
    ) -> dict[str, Any]:
        """Send one call and wait for its answer (the caller bounds the wait); a question the
        server asks meanwhile goes to `asker`, its progress reports to `progress`. A call
        abandoned (cancelled) is cancelled in the worker too."""
        writer = await self._connect()
        request_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        if asker is not None:
            self.askers[request_id] = asker
        if progress is not None:
            self.progress[request_id] = progress
        if log is not None:
            self.logs[request_id] = log
            request = {**request, "log_level": log.level}
        try:
            writer.write(encode({**request, "id": request_id}))
            await writer.drain()
        except ConnectionError as exc:
            self.pending.pop(request_id, None)
            self.askers.pop(request_id, None)
            self.progress.pop(request_id, None)
            self.logs.pop(request_id, None)
            raise McpFailure("connect", f"the runtime worker at {self.address}: {exc}") from exc
        try:
            message = await future
            await self._notifications_delivered(request_id)
        except asyncio.CancelledError:
            with contextlib.suppress(ConnectionError):
                writer.write(encode({"cancel": request_id}))
            raise
        finally:
            self.notified.pop(request_id, None)
            self.pending.pop(request_id, None)
            self.askers.pop(request_id, None)
            self.progress.pop(request_id, None)
            self.logs.pop(request_id, None)
        if "error" in message:
            error = message["error"]
            if error.get("refusal") == port.DEFINITION_CHANGED:
                # The worker's session lists the tool with another definition than the one this
                # call was allowed for: refused there, never sent (as a pooled session's).
                raise ToolroomUnavailable(port.DEFINITION_CHANGED, str(error.get("message", "")))
            kind = error.get("kind")
            raise McpFailure(kind if kind in _KINDS else "protocol", str(error.get("message", "")))
        result: dict[str, Any] = message["result"]
        return result

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.reader_task is not None:
            self.reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self.reader_task


class RuntimeRoute:
    """How this gateway process reaches the stdio and sandboxed servers: where each runs (kept
    until a call fails), when it last asked for one to stay warm, the links to the workers."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.locations: dict[int, port.RuntimeLocation] = {}
        self.links: dict[str, RuntimeLink] = {}
        self._demanded: dict[int, float] = {}

    async def call(  # noqa: PLR0917 (the steps of one call)
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
            location = await self._location(server_id)
        if not location.running:
            try:
                await in_thread(
                    port.server_runtime_demand,
                    server_id=server_id,
                    idle_stop_seconds=target.policy.idle_stop_seconds,
                    start=True,
                )
            except port.BrokerUnavailable as exc:
                raise ToolroomUnavailable(
                    BROKER_UNAVAILABLE,
                    f"the server is not running and could not be started: {exc}.",
                ) from exc
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
                location = await self._location(server_id)
        elif time.monotonic() - self._demanded.get(server_id, 0.0) >= DEMAND_SECONDS:
            # Keep an on-demand server warm while it is used (written at most twice a minute).
            self._demanded[server_id] = time.monotonic()
            await in_thread(
                port.server_runtime_demand,
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
        clock = current_clock.get()  # the worker's deadline is the maximum; ours moves
        try:
            return await link.call(
                {
                    "server_id": server_id,
                    "scope": key[1],
                    "tool": target.tool_name,
                    "arguments": dict(arguments),
                    "timeout": clock.remaining() if clock else max(0.05, end - time.monotonic()),
                    "meta": meta or {},
                    # What the worker's session must list for the call to be sent (a rug pull
                    # seen as it opens is refused, not sent: workers/definitions.py).
                    "definition_hash": target.definition_hash if op.kind == "call_tool" else "",
                    "op": op.kind,
                    "name": op.name,
                    "op_arguments": op.arguments or {},
                },
                asker=current_questions.get(),
                progress=clock.progress if clock else None,
                log=current_caller_log.get(),
            )
        except McpFailure as failure:
            if failure.kind in ("connect", "closed"):
                self.locations.pop(server_id, None)  # look it up again on the next attempt
            raise

    async def _location(self, server_id: int) -> port.RuntimeLocation:
        try:
            return await in_thread(port.server_runtime_location, server_id=server_id)
        except port.RuntimeAddressUnavailable as exc:
            raise ToolroomUnavailable(CACHE_UNAVAILABLE, f"{exc}.") from exc
