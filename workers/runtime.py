"""Warm runtimes: servers kept running with an open session inside a runtime worker.

A runtime worker is a Celery worker that consumes the `runtime` queue (and its own worker-direct
queue) with the threads pool. When it is ready it starts one `RuntimeManager`: an asyncio event
loop in a thread of its own. Each warm server has exactly one owner task on that loop, which
opens the session, serves requests (each in a child task, so a slow call does not block a probe),
restarts the session within the server's restart policy, and closes it. Celery tasks running in
the same process hand work to the loop and wait for the answer. See docs/workers.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from django.conf import settings

from registry.gateway.runtimes import runtime_endpoint_advertise, runtime_endpoint_secret
from registry.servers.gateway_policy import server_runtime_wanted
from registry.servers.jobs.discovery import DiscoveryOutcome
from registry.servers.jobs.health import HealthResult
from registry.servers.jobs.launch import LaunchPlan, server_launch_plan
from registry.servers.jobs.runtime import runtime_claim, runtime_heartbeat, runtime_report
from registry.servers.models import McpServer, RuntimeState
from workers.adapters.mcp_client import Asker, Deadlines, McpConnection, McpFailure, elapsed_ms
from workers.adapters.negotiation import connect_negotiated
from workers.definitions import DefinitionWatch, worker_definitions_checked
from workers.health import probe
from workers.launch import session_mode, target_for
from workers.listing import failed_outcome, list_everything
from workers.orm import orm_in_thread
from workers.runtime_endpoint import RuntimeEndpoint, call_work
from workers.session_pool import UpstreamPool, until_abandoned

logger = logging.getLogger(__name__)
T = TypeVar("T")

HEARTBEAT_SECONDS = 5.0
# A failed heartbeat is retried this many times (with backoff) before the round is given up.
HEARTBEAT_ATTEMPTS = 4
RESTART_BACKOFF_BASE = 1.0
RESTART_BACKOFF_MAX = 60.0
COMMAND_TIMEOUT = 120.0


_db = orm_in_thread


@dataclass
class _Request:
    work: Callable[[McpConnection], Awaitable[Any]]
    future: asyncio.Future[Any]
    # A failure of this kind means the session is gone; the owner restarts it.
    fatal: bool = False


_STOP = object()


class _Dead:
    """Put on the queue when a session is found dead. Each session makes its own: the probe
    that finds the session closed and the exit watcher may both report one death, and the second
    report must not end the next session (an earlier one shared marker did exactly that)."""


class WarmRuntime:
    """One server's warm session and the task that owns it."""

    def __init__(self, manager: RuntimeManager, plan: LaunchPlan) -> None:
        self.manager = manager
        self.plan = plan
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        # `ready`: the session takes work. `announced`: RUNNING is also in the database. Work is
        # accepted before the announcement, so whoever reads RUNNING can send work at once.
        self.ready = asyncio.Event()
        self.announced = asyncio.Event()
        self.finished = asyncio.Event()
        self.stopping = False
        self.restarts = 0
        self.last_error = ""
        self.running_since: float | None = None  # monotonic, while a session is up
        # What the current session listed on open or since (as UpstreamSession.listed).
        self.listed: dict[str, str] | None = None
        self.task: asyncio.Task[None] | None = None

    @property
    def server_id(self) -> int:
        return self.plan.server_id

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._own(), name=f"runtime:{self.plan.slug}"
        )

    async def request(
        self, work: Callable[[McpConnection], Awaitable[T]], *, fatal: bool = False
    ) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await self.queue.put(_Request(work, future, fatal))
        return await future

    async def stop(self) -> None:
        self.stopping = True
        await self.queue.put(_STOP)
        await self.finished.wait()

    async def _report(self, state: RuntimeState, *, error: str = "", stderr: str = "") -> None:
        still_ours = await _db(
            runtime_report,
            server_id=self.server_id,
            owner=self.manager.owner,
            state=state,
            error=error,
            stderr_tail=stderr or None,
            restarts=self.restarts,
        )
        if not still_ours and state not in (RuntimeState.STOPPED, RuntimeState.FAILED):
            logger.warning("%s was taken over by another worker; stopping", self.plan.slug)
            self.stopping = True

    async def _own(self) -> None:
        """Open, serve, restart within policy, close: everything on this one task."""
        try:
            while not self.stopping:
                failure = await self._session_once()
                if self.stopping or failure is None:
                    break
                self.last_error = failure.describe()
                self.ready.clear()
                self.announced.clear()
                if (
                    self.running_since is not None
                    and time.monotonic() - self.running_since
                    >= settings.TOOLROOM_RUNTIME_STABLE_SECONDS
                ):
                    # It ran long enough to count as healthy: this crash starts a new budget,
                    # rather than the 4th crash in a runtime's whole life disabling it for good.
                    self.restarts = 0
                self.running_since = None
                exhausted = (
                    self.plan.restart_policy == "never"
                    or self.restarts >= self.plan.restart_max_attempts
                )
                if exhausted:
                    await self._report(
                        RuntimeState.FAILED,
                        error=f"Gave up after {self.restarts} restart(s): {self.last_error}",
                        stderr=failure.stderr_tail,
                    )
                    return
                self.restarts += 1
                await self._report(
                    RuntimeState.STARTING, error=self.last_error, stderr=failure.stderr_tail
                )
                delay = min(RESTART_BACKOFF_BASE * 2 ** (self.restarts - 1), RESTART_BACKOFF_MAX)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))  # noqa: S311
            await self._report(RuntimeState.STOPPED)
        except Exception:
            logger.exception("runtime %s crashed", self.plan.slug)
        finally:
            self.ready.clear()
            self.announced.clear()
            self._fail_pending("The warm runtime stopped.")
            self.finished.set()

    async def _session_once(self) -> McpFailure | None:
        """Hold one session until stopped (None) or until it dies (the failure)."""
        deadlines = Deadlines(
            connect=60.0, call=float(max(30, self.plan.health_check_timeout_seconds))
        )
        try:
            target = await target_for(self.plan)
            # Discovery and health checks use this session too: it declares what every session
            # declares (connect), so its tool list matches a cold discovery's and the calls'.
            async with connect_negotiated(
                target,
                deadlines=deadlines,
                mode=session_mode(self.plan),
                watch_tools=self.manager.definitions.listener(
                    self.plan, self.request, self._listed
                ),
            ) as connection:
                # A rug pull is checked on every open and on the server's list_changed.
                self.listed = await self.manager.definitions.opened(self.server_id, connection)
                self.ready.set()
                self.running_since = time.monotonic()
                await self._report(RuntimeState.RUNNING, stderr=connection.stderr_tail())
                self.announced.set()
                if self.stopping:  # another worker holds it now
                    return None
                return await self._serve(connection)
        except McpFailure as failure:
            return failure

    def _listed(self, hashes: dict[str, str]) -> None:
        self.listed = hashes

    async def _serve(self, connection: McpConnection) -> McpFailure | None:
        death: list[McpFailure] = []
        dead = _Dead()

        async def handle(request: _Request) -> None:
            try:
                result = await until_abandoned(request.work, connection, request.future)
            except McpFailure as failure:
                if not request.future.done():
                    request.future.set_exception(failure)
                if failure.kind == "closed" or (request.fatal and failure.kind == "timeout"):
                    death.append(failure)
                    await self.queue.put(dead)
            except Exception as exc:
                if not request.future.done():
                    request.future.set_exception(exc)
            else:
                if not request.future.done():
                    request.future.set_result(result)

        async def watch() -> None:
            """A local server's process exit, or a sandboxed server's container exit, is noticed
            at once, not at the next probe."""
            await connection.wait_process_gone()
            death.append(
                McpFailure(
                    "closed",
                    "The server process exited.",
                    stderr_tail=connection.stderr_tail(),
                )
            )
            await self.queue.put(dead)

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            while True:
                item = await self.queue.get()
                if item is _STOP:
                    group.cancel_scope.cancel()
                    return None
                if item is dead:
                    group.cancel_scope.cancel()
                    return death[0]
                if isinstance(item, _Dead):
                    continue  # an earlier session's death, reported twice: handled already
                group.start_soon(handle, item)
        return None

    def _fail_pending(self, message: str) -> None:
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, _Request) and not item.future.done():
                item.future.set_exception(McpFailure("closed", message))


class RuntimeManager:
    """The warm runtimes of one runtime worker, on an event loop in a thread of its own."""

    def __init__(self, owner: str, *, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self.owner = owner
        self.heartbeat_seconds = heartbeat_seconds
        self.runtimes: dict[int, WarmRuntime] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop, name="toolroom-runtimes", daemon=True
        )
        self._heartbeat: asyncio.Task[None] | None = None
        # The private endpoint the gateway calls tools through, and the per-team and
        # per-conversation sessions of the servers held here (docs/gateway.md).
        self.endpoint: RuntimeEndpoint | None = None
        self.endpoint_address = ""
        self.definitions = DefinitionWatch(worker_definitions_checked)
        self.scoped = UpstreamPool(
            idle_seconds=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
            definitions=self.definitions,
        )
        self._scoped_host: asyncio.Task[None] | None = None

    # --- lifecycle (called from the worker's main thread) -----------------------------------

    def start(self) -> None:
        self._thread.start()
        self._call(self._start_heartbeat(), timeout=10)

    def shutdown(self, timeout: float = 30.0) -> None:
        with contextlib.suppress(Exception):
            self._call(self._stop_all(), timeout=timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def responsive(self, timeout: float = 2.0) -> bool:
        """Whether the manager's event loop answers (its thread may have died, or be stuck)."""
        if not self._thread.is_alive():
            return False
        try:
            self._call(asyncio.sleep(0), timeout=timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            return False
        return True

    def _call(self, coro: Coroutine[Any, Any, T], *, timeout: float = COMMAND_TIMEOUT) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    # --- what Celery tasks call (from pool threads) ---------------------------------------------

    def holds(self, server_id: int) -> bool:
        runtime = self.runtimes.get(server_id)
        return runtime is not None and not runtime.finished.is_set()

    def command(self, server_id: int, action: str) -> str:
        return self._call(self._command(server_id, action))

    def discover(self, server_id: int) -> DiscoveryOutcome:
        return self._call(self._discover(server_id))

    def probe_batch(self, server_ids: list[int]) -> list[HealthResult]:
        return self._call(self._probe_batch(server_ids))

    # --- on the loop ----------------------------------------------------------------------------

    async def _start_heartbeat(self) -> None:
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat())
        self._scoped_host = asyncio.get_running_loop().create_task(self._host_scoped())
        if settings.TOOLROOM_RUNTIME_ENDPOINT_ENABLED:
            await self._start_endpoint()

    async def _start_endpoint(self) -> None:
        self.endpoint = RuntimeEndpoint(
            host=settings.TOOLROOM_RUNTIME_ENDPOINT_HOST,
            port=settings.TOOLROOM_RUNTIME_ENDPOINT_PORT,
            secret=await _db(runtime_endpoint_secret),
            handle=self._endpoint_call,
        )
        address = await self.endpoint.start()
        advertised = settings.TOOLROOM_RUNTIME_ENDPOINT_ADVERTISE
        if not advertised and settings.TOOLROOM_RUNTIME_ENDPOINT_HOST in ("0.0.0.0", "::"):  # noqa: S104
            advertised = socket.gethostname()  # listening on every address: reachable by name
        if advertised:
            address = f"{advertised}:{address.rpartition(':')[2]}"
        self.endpoint_address = address
        await _db(runtime_endpoint_advertise, owner=self.owner, address=address)

    async def _host_scoped(self) -> None:
        async with anyio.create_task_group() as group:
            self.scoped.attach(group)
            await anyio.sleep_forever()

    async def _endpoint_call(self, request: dict[str, Any], ask: Asker) -> dict[str, Any]:
        """A gateway's call of a tool of a server held here, in the isolation scope it names; a
        question the server asks during it goes to the gateway (`ask`)."""
        server_id = int(request["server_id"])
        scope = str(request.get("scope") or "shared")
        timeout = float(request.get("timeout") or 30.0)
        runtime = self.runtimes.get(server_id)
        if runtime is None or runtime.finished.is_set():
            raise McpFailure("connect", "This runtime worker does not hold the server (any more).")
        # A per-team or per-conversation session of a local server is a process of its own: it
        # starts at once, alongside the server's shared session (a cold call waits for one
        # start, not two in a row). A sandboxed server's waits for the shared session, which
        # resolves (or builds) the image once.
        if scope == "shared" or runtime.plan.sandboxed:
            try:
                async with asyncio.timeout(timeout):
                    await runtime.ready.wait()
            except TimeoutError:
                raise McpFailure(
                    "timeout", f"The server was not ready within {timeout:g} s."
                ) from None

        # Each session lists its tools as it opens: a call of a tool it lists with another
        # definition than the approved one is refused there, never sent (a rug pull).
        if scope == "shared":
            return await runtime.request(call_work(request, ask, lambda: runtime.listed))
        plan = runtime.plan

        async def load_plan() -> LaunchPlan:
            return plan

        session, _ = await self.scoped.session((server_id, scope), load_plan)
        return await session.request(call_work(request, ask, lambda: session.listed))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            held = [pk for pk, runtime in self.runtimes.items() if not runtime.finished.is_set()]
            lost = await self._renew(held)
            if lost is None:
                continue
            if self.endpoint_address:
                with contextlib.suppress(Exception):
                    await _db(
                        runtime_endpoint_advertise, owner=self.owner, address=self.endpoint_address
                    )
            for pk in lost:
                await self.scoped.drop_server(pk)
                runtime = self.runtimes.pop(pk, None)
                if runtime is not None:
                    logger.warning("lost the claim on %s; stopping it here", runtime.plan.slug)
                    runtime.stopping = True
                    await runtime.queue.put(_STOP)

    async def _renew(self, held: list[int]) -> list[int] | None:
        """Renew the claims, retrying a failure (a database blip: the broken connection is
        closed and the next try gets a new one) a few times within the heartbeat period before
        giving up this round; claims go stale only after TOOLROOM_RUNTIME_STALE_SECONDS."""
        for attempt in range(HEARTBEAT_ATTEMPTS):
            try:
                return await _db(runtime_heartbeat, owner=self.owner, server_ids=held)
            except Exception:
                logger.warning(
                    "runtime heartbeat failed (attempt %d of %d)",
                    attempt + 1,
                    HEARTBEAT_ATTEMPTS,
                    exc_info=True,
                )
                await asyncio.sleep(min(2**attempt * 0.5, self.heartbeat_seconds / 4))
        logger.error("runtime heartbeat failed %d times; next try next period", HEARTBEAT_ATTEMPTS)
        return None

    async def _command(self, server_id: int, action: str) -> str:
        if action in ("stop", "restart"):
            await self.scoped.drop_server(server_id)
            runtime = self.runtimes.pop(server_id, None)
            if runtime is not None:
                await runtime.stop()
            if action == "stop":
                return "stopped"
        return await self._ensure_started(server_id)

    async def _ensure_started(self, server_id: int) -> str:
        if self.holds(server_id):
            return "running"
        server = await _db(McpServer.objects.filter(pk=server_id).first)
        if server is None or not await _db(server_runtime_wanted, server_id=server_id):
            return "not wanted"
        # The plan first: from the claim on, the gateway may send calls (docs/gateway.md), and
        # the runtime is held here from the same step of the loop.
        plan = await _db(server_launch_plan, server=server)
        if not await _db(runtime_claim, server_id=server_id, owner=self.owner):
            return "held elsewhere"
        runtime = WarmRuntime(self, plan)
        self.runtimes[server_id] = runtime
        runtime.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                announced = asyncio.ensure_future(runtime.announced.wait())
                done = asyncio.ensure_future(runtime.finished.wait())
                await asyncio.wait({announced, done}, return_when=asyncio.FIRST_COMPLETED)
                for waiter in (announced, done):
                    waiter.cancel()
        return "running" if runtime.announced.is_set() else "starting"

    async def _stop_all(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.endpoint is not None:
            await self.endpoint.close()
        await self.scoped.close()
        await self.definitions.close()
        if self._scoped_host is not None:
            self._scoped_host.cancel()
        runtimes = list(self.runtimes.values())
        self.runtimes.clear()
        await asyncio.gather(*(runtime.stop() for runtime in runtimes), return_exceptions=True)

    async def _discover(self, server_id: int) -> DiscoveryOutcome:
        runtime = self.runtimes.get(server_id)
        via = "warm runtime"
        if runtime is None:
            return failed_outcome(
                McpFailure("closed", "The warm runtime is not held here any more."),
                timings={},
                via=via,
            )
        start = time.perf_counter()

        async def work(connection: McpConnection) -> DiscoveryOutcome:
            return await list_everything(connection, timings={}, via=via)

        try:
            async with asyncio.timeout(120):
                await runtime.ready.wait()
            outcome = await runtime.request(work)
        except (McpFailure, TimeoutError) as exc:
            failure = (
                exc
                if isinstance(exc, McpFailure)
                else McpFailure("timeout", "The warm runtime was not ready within 120 s.")
            )
            return failed_outcome(failure, timings={"total": elapsed_ms(start)}, via=via)
        outcome.timings_ms["total"] = elapsed_ms(start)
        return outcome

    async def _probe_one(self, server_id: int) -> HealthResult:
        runtime = self.runtimes.get(server_id)
        start = time.perf_counter()
        if runtime is None or not runtime.ready.is_set():
            error = (runtime.last_error if runtime else "") or "The warm runtime is not running."
            return HealthResult(server_id, ok=False, error=error)
        timeout = float(runtime.plan.health_check_timeout_seconds)
        plan = runtime.plan

        async def work(connection: McpConnection) -> list[dict[str, Any]] | None:
            try:
                async with asyncio.timeout(timeout):
                    return await probe(connection, plan)
            except TimeoutError:
                raise McpFailure(
                    "timeout", f"The warm runtime did not answer within {timeout:g} s."
                ) from None

        try:
            async with asyncio.timeout(timeout + 5):
                tools = await runtime.request(work, fatal=True)
        except McpFailure as failure:
            return HealthResult(
                server_id, ok=False, latency_ms=elapsed_ms(start), error=failure.describe()
            )
        except TimeoutError:
            return HealthResult(
                server_id,
                ok=False,
                latency_ms=elapsed_ms(start),
                error=f"The warm runtime did not answer within {timeout:g} s.",
            )
        return HealthResult(server_id, ok=True, latency_ms=elapsed_ms(start), tools=tools)

    async def _probe_batch(self, server_ids: list[int]) -> list[HealthResult]:
        return list(await asyncio.gather(*(self._probe_one(pk) for pk in server_ids)))


# Which RuntimeManager this process runs, if it is a runtime worker (set at worker start).
_manager: RuntimeManager | None = None


def current_manager() -> RuntimeManager | None:
    return _manager


def set_manager(manager: RuntimeManager | None) -> None:
    global _manager  # noqa: PLW0603 - one manager per runtime worker process
    _manager = manager


def warm_holder(server_id: int) -> RuntimeManager | None:
    """The one place that routes work on a server warm or cold: this process's manager if it
    holds the server warm (use its session), else None (open a session of one's own)."""
    manager = _manager
    return manager if manager is not None and manager.holds(server_id) else None


def start_manager(owner: str) -> RuntimeManager:
    manager = current_manager()
    if manager is None:
        manager = RuntimeManager(owner)
        manager.start()
        set_manager(manager)
    return manager


def stop_manager() -> None:
    manager = current_manager()
    if manager is not None:
        set_manager(None)
        manager.shutdown()
