"""An MCP transport to a server running in a hardened container, over the container's own stdio.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import docker.errors
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from workers.adapters.sandbox import networks
from workers.adapters.sandbox.container_end import read_fate, remove_container
from workers.adapters.sandbox.egress_pool import EGRESS_POOL, EgressLease, EgressPool
from workers.adapters.sandbox.engine import Engine, connect_engine, container_attach_socket
from workers.adapters.sandbox.errors import ContainerFate, SandboxError
from workers.adapters.sandbox.images import build_proxy_image
from workers.adapters.sandbox.spec import (
    ContainerSpec,
    hardened_host_config,
    resource_labels,
    resource_name,
)
from workers.adapters.sandbox.streams import (
    STDERR,
    STDOUT,
    FrameDemuxer,
    LineSplitter,
    LineTooLongError,
    StderrTail,
    StreamProtocolError,
)

logger = logging.getLogger(__name__)
server_logger = logging.getLogger("workers.sandbox.server")

DEFAULT_STDERR_LINES = 50
DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
START_TIMEOUT = 60.0
# Time for the server to exit on its own once its stdin is closed (as the SDK's stdio client).
STOP_GRACE = 2.0
# Time to learn the exit code and any OOM kill from the engine's events.
FATE_TIMEOUT = 5.0
REMOVE_TIMEOUT = 10.0
WRITER_FLUSH_TIMEOUT = 0.5

_T = TypeVar("_T")


async def _engine_call(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Run a blocking engine call in a worker thread (each is bounded by the client's timeout)."""
    return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))


def _parse_line(line: bytes) -> SessionMessage | Exception:
    """One stdout line as a message, or the parse error as a value (as the SDK's stdio does)."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        logger.warning("A sandboxed server wrote a line that is not JSON-RPC: %.200r", line)
        return exc
    return SessionMessage(message)


@dataclass
class _Session:
    """What one transport made on the engine, and how far it got."""

    session_id: str
    started_at: float = 0.0
    container_id: str | None = None
    network_id: str | None = None
    # proxied: the server's kept network and proxy (egress_pool), released at the end
    egress: EgressLease | None = None
    # Names of what a create call was made for: if the call failed after the engine made the
    # thing (a timeout), the name still finds it.
    network_name: str | None = None
    server_name: str | None = None
    conn: anyio.abc.SocketStream | None = None
    shutting_down: bool = False
    stopped_by_toolroom: bool = False
    error: str = ""
    exited: anyio.Event = field(default_factory=anyio.Event)
    writer_done: anyio.Event = field(default_factory=anyio.Event)
    fate_lock: anyio.Lock = field(default_factory=anyio.Lock)
    # The pipe tasks' own scopes: a caller's cancellation must not stop them before the server
    # is stopped (the reader is what sees the container exit); the transport ends them itself.
    task_scopes: list[anyio.CancelScope] = field(default_factory=list)


class SandboxTransport:
    """The MCP transport to one sandboxed server; enter it once (see the module's docstring)."""

    def __init__(
        self,
        spec: ContainerSpec,
        *,
        engine: Engine | None = None,
        stderr_lines: int = DEFAULT_STDERR_LINES,
        proxy_image: str | None = None,
        start_timeout: float = START_TIMEOUT,
        stop_grace: float = STOP_GRACE,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        egress_pool: EgressPool | None = None,
    ) -> None:
        self.spec = spec
        self.session_id = secrets.token_hex(6)
        self.container_name = resource_name(spec, session_id=self.session_id, role="server")
        self.fate: ContainerFate | None = None
        self.proxy_log: deque[str] = deque(maxlen=200)
        self._engine = engine
        self._stderr = StderrTail(stderr_lines)
        self._proxy_image = proxy_image
        self._start_timeout = start_timeout
        self._stop_grace = stop_grace
        self._max_line_bytes = max_line_bytes
        self._egress_pool = egress_pool or EGRESS_POOL
        self._state = _Session(self.session_id)
        self._context: contextlib.AbstractAsyncContextManager[TransportStreams] | None = None

    @property
    def container_id(self) -> str | None:
        return self._state.container_id

    def stderr_tail(self) -> tuple[str, ...]:
        return self._stderr.tail()

    @property
    def exited(self) -> anyio.Event:
        """Set when the container's attach stream ended: it exited, was killed or was stopped."""
        return self._state.exited

    async def __aenter__(self) -> TransportStreams:
        if self._context is not None:
            raise RuntimeError("A SandboxTransport is entered once; make a new one per session.")
        self._context = self._run()
        return await self._context.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._context is None:
            raise RuntimeError("This SandboxTransport was not entered.")
        return await self._context.__aexit__(exc_type, exc, tb)

    # --- the session's life ---------------------------------------------------------------------

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[TransportStreams]:
        state = self._state
        owns_engine = self._engine is None
        engine = self._engine
        try:
            if engine is None:
                engine = await _engine_call(connect_engine)
            try:
                with anyio.fail_after(self._start_timeout):
                    await self._start(engine, state)
            except TimeoutError as exc:
                raise SandboxError(
                    f"The sandbox for {self.spec.server_key} did not start within "
                    f"{self._start_timeout:.0f} s."
                ) from exc
            async with self._streams(engine, state) as streams:
                yield streams
        except Exception as exc:
            fate = self.fate
            if fate is not None and fate.failed and not isinstance(exc, SandboxError):
                raise SandboxError(f"{self.spec.server_key}: {fate.describe()}", fate=fate) from exc
            raise
        finally:
            with anyio.CancelScope(shield=True):
                if engine is not None:
                    await self._remove_everything(engine, state)
                    if owns_engine:
                        engine.close()

    async def _start(self, engine: Engine, state: _Session) -> None:
        spec = self.spec
        state.started_at = time.time()
        env = dict(spec.env)
        dns: tuple[str, ...] = ()
        dns_options: tuple[str, ...] = ()
        network_mode = "none"
        lease: EgressLease | None = None
        make: Callable[[], Coroutine[Any, Any, None]] | None = None
        before_start: Callable[[], Coroutine[Any, Any, None]] | None = None
        if spec.network_mode == "internal":
            labels = resource_labels(spec, session_id=state.session_id, role="network")
            name = state.network_name = resource_name(spec, session_id=state.session_id, role="net")
            network_id = await _engine_call(networks.create_session_network, engine, name, labels)
            state.network_id = network_mode = network_id
            dns, dns_options = networks.ISOLATED_DNS, networks.ISOLATED_DNS_OPTIONS
        elif spec.network_mode == "proxied":
            # The server's network and proxy are kept across its sessions (egress_pool). The
            # session that makes them is on the network itself: its container is created while
            # the network is, and starts once it exists; the proxy (found by its alias on the
            # network) starts after it, the network's holder later. Later sessions join the
            # holder's namespace (no interface to set up at each start; its DNS settings are
            # the holder's, isolated as above) and start once it runs. The session opens once
            # the proxy listens.
            pool = self._egress_pool
            lease = state.egress = await _engine_call(pool.lease, engine, spec)
            pool.listen(lease, self.proxy_log)
            network_mode = lease.network_mode
            env.update(networks.proxy_environment(networks.PROXY_ALIAS))
            if lease.fresh:
                dns, dns_options = networks.ISOLATED_DNS, networks.ISOLATED_DNS_OPTIONS
                make = functools.partial(self._make_egress, engine, lease)
                before_start = functools.partial(
                    _engine_call, pool.wait_network, lease, timeout=self._start_timeout
                )
            else:
                before_start = functools.partial(
                    _engine_call, pool.wait_created, lease, timeout=self._start_timeout
                )
        elif spec.network_mode == "bridge":
            network_mode = await _engine_call(
                networks.ensure_egress_network, engine, installation=spec.installation
            )
        start_server = functools.partial(
            self._start_server,
            engine,
            state,
            env,
            network_mode,
            dns=dns,
            dns_options=dns_options,
            before_start=before_start,
        )
        if make is None:
            await start_server()
        else:
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(make)
                    try:
                        await start_server()
                    finally:
                        if state.egress is not None:
                            self._egress_pool.server_went(state.egress)
            except BaseExceptionGroup as failures:
                # One failure is the story (the other task was cancelled because of it).
                first = failures.exceptions[0]
                while isinstance(first, BaseExceptionGroup):
                    first = first.exceptions[0]
                raise first from None
        if lease is not None:
            await _engine_call(self._egress_pool.wait_ready, lease, timeout=self._start_timeout)

    async def _start_server(
        self,
        engine: Engine,
        state: _Session,
        env: dict[str, str],
        network_mode: str,
        *,
        dns: tuple[str, ...],
        dns_options: tuple[str, ...],
        before_start: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """Create the server's container, attach to it, and start it (after `before_start`)."""
        spec = self.spec

        host_config = engine.api.create_host_config(
            **hardened_host_config(
                memory_mb=spec.memory_mb,
                cpus=spec.cpus,
                pids_limit=spec.pids_limit,
                read_only_root=spec.read_only_root,
                tmpfs_mb=spec.tmpfs_mb,
                network_mode=network_mode,
                mounts=spec.mounts,
                storage=spec.storage,
                dns=dns,
            ),
            **({"dns_opt": list(dns_options)} if dns_options else {}),
        )
        state.server_name = self.container_name
        try:
            created = await _engine_call(
                engine.api.create_container,
                spec.image,
                command=list(spec.argv) or None,
                name=self.container_name,
                user=spec.user,
                environment=env,
                working_dir=spec.working_dir or None,
                stdin_open=True,
                tty=False,
                labels=resource_labels(spec, session_id=state.session_id, role="server"),
                host_config=host_config,
                use_config_proxy=False,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"Image {spec.image} is not on the engine: build it first (python manage.py "
                "sandbox build-package ...) or correct the server's image."
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"The engine refused the server's container: {exc.explanation or exc}"
            ) from exc
        state.container_id = str(created["Id"])
        sock = await _engine_call(
            container_attach_socket, engine, state.container_id, stdin=True, blocking=False
        )
        state.conn = await anyio.abc.SocketStream.from_socket(sock)
        if before_start is not None:
            await before_start()
        try:
            await _engine_call(engine.api.start, state.container_id)
        except docker.errors.APIError as exc:
            state.error = str(exc.explanation or exc)
            raise SandboxError(
                f"The server's container did not start: {state.error}. Check the command "
                f"{list(spec.argv)!r} against the image {spec.image}."
            ) from exc
        logger.info(
            "Sandbox %s started for %s (%s, network %s)",
            self.container_name,
            spec.server_key,
            spec.image,
            spec.network_mode,
        )

    async def _make_egress(self, engine: Engine, lease: EgressLease) -> None:
        """A fresh lease: make its network, holder and proxy (egress_pool.EgressPool.make)."""
        proxy_image = self._proxy_image

        def image() -> str:  # the one built from this code: kept if there, else built now
            return proxy_image or build_proxy_image(engine=engine).reference

        await _engine_call(
            self._egress_pool.make,
            engine,
            lease,
            self.spec,
            image=image,
            timeout=self._start_timeout,
        )

    @asynccontextmanager
    async def _streams(self, engine: Engine, state: _Session) -> AsyncIterator[TransportStreams]:
        conn, container_id = state.conn, state.container_id
        if conn is None or container_id is None:
            raise SandboxError("The server's container is not attached.")
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as group:
            group.start_soon(
                _shielded, state, self._read_server, engine, state, container_id, conn, read_writer
            )
            group.start_soon(
                _shielded, state, self._write_server, state, conn, write_reader, read_writer
            )
            try:
                yield read_stream, write_stream
            finally:
                state.shutting_down = True
                # The server must be stopped even when the caller is cancelled; every wait in
                # here is bounded.
                with anyio.CancelScope(shield=True):
                    read_stream.close()
                    write_stream.close()
                    await self._stop(engine, state)
                    for stream in (read_stream, write_stream, read_writer, write_reader):
                        await stream.aclose()
                for scope in state.task_scopes:
                    scope.cancel()
                group.cancel_scope.cancel()

    async def _read_server(
        self,
        engine: Engine,
        state: _Session,
        container_id: str,
        conn: anyio.abc.SocketStream,
        read_writer: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    ) -> None:
        demux = FrameDemuxer()
        lines = LineSplitter(self._max_line_bytes)
        deliver = True

        async def deliver_item(item: SessionMessage | Exception) -> None:
            nonlocal deliver
            if deliver:
                try:
                    await read_writer.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    deliver = False  # the session is gone; keep draining until the exit

        async with read_writer:
            try:
                while True:
                    try:
                        data = await conn.receive(65536)
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                        OSError,
                    ):
                        break  # the container's output ended: it exited, or was stopped
                    for stream, piece in demux.feed(data):
                        if stream == STDERR:
                            for text in self._stderr.feed(piece):
                                server_logger.debug("%s: %s", self.spec.server_key, text)
                        elif stream == STDOUT:
                            for line in lines.feed(piece):
                                if line.strip():
                                    await deliver_item(_parse_line(line))
            except (StreamProtocolError, LineTooLongError) as exc:
                state.error = str(exc)
                logger.warning("Sandbox %s: %s; stopping it", self.container_name, exc)
                await deliver_item(SandboxError(f"{self.spec.server_key}: {exc}"))
                await self._kill(engine, state)
            finally:
                self._stderr.finish()
                state.exited.set()
            if not state.shutting_down:
                fate = await self._learn_fate(engine, state, container_id)
                logger.warning("Sandbox %s: %s", self.container_name, fate.describe())
                await deliver_item(
                    SandboxError(f"{self.spec.server_key}: {fate.describe()}", fate=fate)
                )

    async def _write_server(
        self,
        state: _Session,
        conn: anyio.abc.SocketStream,
        write_reader: anyio.abc.ObjectReceiveStream[SessionMessage],
        read_writer: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    ) -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await conn.send(json.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server is gone: end the session's reads rather than leave a request hanging.
            await read_writer.aclose()
        finally:
            state.writer_done.set()

    async def _kill(self, engine: Engine, state: _Session) -> None:
        if state.container_id is None:
            return
        state.stopped_by_toolroom = True
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            await _engine_call(engine.api.kill, state.container_id)

    async def _stop(self, engine: Engine, state: _Session) -> None:
        """Close the server's stdin, give it the grace period, then kill it; learn its fate."""
        with anyio.move_on_after(WRITER_FLUSH_TIMEOUT):
            await state.writer_done.wait()
        if state.conn is not None:
            with contextlib.suppress(Exception):
                await state.conn.send_eof()
        with anyio.move_on_after(self._stop_grace):
            await state.exited.wait()
        if not state.exited.is_set():
            await self._kill(engine, state)
            with anyio.move_on_after(REMOVE_TIMEOUT):
                await state.exited.wait()
        if state.container_id is not None:
            await self._learn_fate(engine, state, state.container_id)

    async def _learn_fate(
        self, engine: Engine, state: _Session, container_id: str, *, wait: float = FATE_TIMEOUT
    ) -> ContainerFate:
        async with state.fate_lock:
            if self.fate is not None:
                return self.fate
            try:
                exit_code, oom = await _engine_call(
                    read_fate, engine, container_id, since=state.started_at, timeout=wait
                )
            except docker.errors.DockerException as exc:
                logger.warning("Could not read the fate of %s: %s", self.container_name, exc)
                exit_code, oom = None, False
            fate = self.fate = ContainerFate(
                container_id=container_id,
                server_key=self.spec.server_key,
                exit_code=exit_code,
                oom_killed=oom,
                stopped_by_toolroom=state.stopped_by_toolroom,
                memory_limit_mb=self.spec.memory_mb,
                stderr_tail=self._stderr.tail(),
                error=state.error,
            )
            return fate

    async def _remove_everything(self, engine: Engine, state: _Session) -> None:
        """Remove the container and its network (a kept one is released), whatever happened."""
        if state.conn is not None:
            with contextlib.suppress(Exception):
                await state.conn.aclose()
        if state.container_id is not None and self.fate is None and not state.shutting_down:
            # It failed before the session began (e.g. it would not start): record that too,
            # without waiting for a death that may never come.
            state.stopped_by_toolroom = not state.error
            await self._learn_fate(engine, state, state.container_id, wait=0)
        problems: list[str] = []
        container = state.container_id or state.server_name
        if container is not None:
            try:
                await _engine_call(remove_container, engine, container, timeout=REMOVE_TIMEOUT)
            except (SandboxError, docker.errors.DockerException) as exc:
                problems.append(str(exc))
        if state.egress is not None:
            try:
                await _engine_call(self._egress_pool.release, engine, state.egress, self.proxy_log)
            except (SandboxError, docker.errors.DockerException) as exc:
                problems.append(str(exc))
        network = state.network_id or state.network_name
        if network is not None:
            try:
                await _engine_call(
                    networks.remove_network_when_empty, engine, network, timeout=REMOVE_TIMEOUT
                )
            except (SandboxError, docker.errors.DockerException) as exc:
                problems.append(str(exc))
        if problems:
            # The janitor removes what is left (it is labelled); the caller's outcome stands.
            logger.error("Sandbox %s left resources: %s", self.container_name, "; ".join(problems))


async def _shielded(state: _Session, function: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run a pipe task that only the transport itself cancels (see `_Session.task_scopes`)."""
    with anyio.CancelScope(shield=True) as scope:
        state.task_scopes.append(scope)
        await function(*args)


def sandbox_transport(
    spec: ContainerSpec,
    *,
    engine: Engine | None = None,
    stderr_lines: int = DEFAULT_STDERR_LINES,
    proxy_image: str | None = None,
    start_timeout: float = START_TIMEOUT,
    stop_grace: float = STOP_GRACE,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    egress_pool: EgressPool | None = None,
) -> SandboxTransport:
    """A transport to `spec`'s server in a fresh hardened container (see the module docstring).

    `engine`: a docker client to use (and leave open); by default one is made and closed.
    `proxy_image`: the egress proxy's image for the proxied mode; by default the one built from
    this code on the base image (built on first use).
    `egress_pool`: where the proxied mode's kept networks live; by default this process's.
    """
    return SandboxTransport(
        spec,
        engine=engine,
        stderr_lines=stderr_lines,
        proxy_image=proxy_image,
        start_timeout=start_timeout,
        stop_grace=stop_grace,
        max_line_bytes=max_line_bytes,
        egress_pool=egress_pool,
    )
