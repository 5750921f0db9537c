"""Sessions to MCP servers over stdio, Streamable HTTP, legacy SSE or any SDK transport.

The one place that knows the official `mcp` SDK's client API. It takes plain targets, returns
plain dicts in MCP's wire form (camelCase keys), puts deadlines of its own around connecting and
around every call (the SDK can hang when a server dies mid-call), captures a bounded tail of a
stdio server's stderr, checks every address an HTTP server's name resolves to against the network
guard at connect time, and turns the many ways a connection fails into one `McpFailure` with a
`kind` and a message meant for an admin.

Every session is opened and closed by the same task (`connect` is an async context manager), as
the SDK requires.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import json
import math
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO, cast

import anyio
import httpcore2
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from registry.core.netguard import UnsafeUrlError, check_resolved_address
from registry.core.tracing import mcp_span
from workers.adapters.sandbox.errors import SandboxError
from workers.adapters.sandbox.transport import SandboxTransport

CLIENT_INFO = types.Implementation(name="toolroom", version="0.1.0")

# Safety limits on what a server may make us hold in memory.
MAX_LIST_PAGES = 1000
MAX_LIST_ITEMS = 100_000
STDERR_TAIL_LINES = 200
STDERR_LINE_CHARS = 1000


FailureKind = Literal[
    "spawn",  # the command could not be started
    "connect",  # the server could not be reached or refused the connection
    "refused",  # the network guard refused the address
    "timeout",  # no answer within our deadline
    "closed",  # the server went away (process exited, connection dropped)
    "protocol",  # the server answered with an MCP error or something that is not MCP
]


# Passing an upstream's question (elicitation) on to whoever made the call: `Asker` takes the
# request's params in wire form and returns the answer in wire form, or raises `AskRefused`.
Asker = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# The call running in this task (0: none): the SDK client's 2026-07-28 input_required driver
# dispatches in the calling task, so it finds the right caller here.
_current_call: contextvars.ContextVar[int] = contextvars.ContextVar(
    "toolroom_current_call", default=0
)
_call_ids = itertools.count(1)


class AskRefused(Exception):
    """The caller cannot answer an upstream's question; the message says why (for the server)."""


class _Askers:
    """The askers of the calls in flight on one session (None: a caller that cannot answer).

    A handshake server's `elicitation/create` does not say which of our requests it belongs to,
    so it is passed on only when exactly one call is in flight on the session; otherwise the
    server is told no one can answer (never a guess: that could show one caller's question to
    another)."""

    def __init__(self) -> None:
        self.in_flight: dict[int, Asker | None] = {}

    async def elicit(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        call_id = _current_call.get()
        if call_id in self.in_flight:
            asker = self.in_flight[call_id]
        else:
            if len(self.in_flight) != 1:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message="Toolroom cannot tell which of its callers this question is for "
                    f"({len(self.in_flight)} calls in flight on this session).",
                )
            (asker,) = self.in_flight.values()
        if asker is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="The caller cannot answer questions mid-call."
            )
        try:
            answer = await asker(_wire(params))
        except AskRefused as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
        return types.ElicitResult.model_validate(answer)


class McpFailure(Exception):
    """Talking to an MCP server failed; `message` says how, for an admin."""

    def __init__(
        self, kind: FailureKind, message: str, *, stderr_tail: str = "", code: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.stderr_tail = stderr_tail
        self.code = code  # the MCP error code, when the server answered with one

    def __str__(self) -> str:
        return self.message

    def describe(self) -> str:
        """The message with the server's last stderr lines, for the admin's "last error"."""
        if not self.stderr_tail:
            return self.message
        return f"{self.message}\n--- server stderr (last lines) ---\n{self.stderr_tail}"


@dataclass(frozen=True)
class StdioTarget:
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    # How to name the server in messages when argv wraps the real command.
    label: str = ""

    def describe(self) -> str:
        if self.label:
            return self.label
        return " ".join(self.argv[:3]) + (" ..." if len(self.argv) > 3 else "")


@dataclass(frozen=True)
class HttpTarget:
    url: str
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    headers: Mapping[str, str] = field(default_factory=dict)
    # Networks the URL's resolved addresses may be in although they are internal.
    allowed_networks: Sequence[str] = ()
    # `_meta` keys of a request copied into HTTP headers of its POST ({meta key: header name}):
    # per-call values (a caller's identity) on a session whose client headers are fixed.
    meta_headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return self.url


@dataclass(frozen=True)
class TransportTarget:
    """A ready-made SDK transport, e.g. a sandboxed container's attached stdio."""

    open_transport: Callable[[], Transport]
    description: str
    stderr_tail: Callable[[], str] = lambda: ""
    # What runs, for reports: e.g. the image, its digest and the command inside it.
    launched: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return self.description


Target = StdioTarget | HttpTarget | TransportTarget


@dataclass(frozen=True)
class Deadlines:
    connect: float = 20.0
    call: float = 30.0


@dataclass(frozen=True)
class ServerIdentity:
    protocol_version: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: str


def mode_for(protocol_version: str) -> str:
    """How to open a session to a server that last negotiated `protocol_version`.

    A modern version is adopted directly (no `server/discover` probe), a handshake version uses
    the handshake; anything else negotiates ("auto").
    """
    if protocol_version in MODERN_PROTOCOL_VERSIONS:
        return protocol_version
    if protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return "legacy"
    return "auto"


def _wire(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


class _StderrTail:
    """A bounded tail of a process's stderr, fed from a pipe by one reader task."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._partial = ""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self.read_fd = read_fd
        # The child process gets a copy of this end; ours is closed once it has started.
        self.writer: TextIO | None = os.fdopen(write_fd, "w")
        # Set when every writer closed the pipe: after start, the server process has exited.
        self.eof = anyio.Event()

    def text(self) -> str:
        lines = list(self.lines)
        if self._partial:
            lines.append(self._partial)
        return "\n".join(lines)

    def _feed(self, chunk: bytes) -> None:
        parts = (self._partial + chunk.decode("utf-8", "replace")).split("\n")
        self._partial = parts.pop()[-STDERR_LINE_CHARS:]
        for line in parts:
            self.lines.append(line[:STDERR_LINE_CHARS])

    def _read_available(self) -> bool:
        """Read what the pipe holds now; False once every writer has closed it."""
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._feed(chunk)

    async def pump(self) -> None:
        while self._read_available():
            await anyio.wait_readable(self.read_fd)
        self.eof.set()

    def close_write_end(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def close(self) -> None:
        self.close_write_end()
        self._read_available()
        with contextlib.suppress(OSError):
            os.close(self.read_fd)


class _GuardedBackend(httpcore2.AnyIOBackend):
    """Resolves host names itself and connects only to addresses the network guard allows."""

    def __init__(self, allowed_networks: Sequence[str]) -> None:
        self.allowed_networks = list(allowed_networks)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        with anyio.fail_after(timeout if timeout is not None else math.inf):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        try:
            for address in addresses:
                check_resolved_address(address, allowed_networks=self.allowed_networks)
        except UnsafeUrlError as exc:
            raise httpcore2.ConnectError(f"{host}: {exc}") from exc
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last_error = exc
        raise last_error or httpcore2.ConnectError(f"{host} has no address")


# One MCP session's connections. No cap on their number: the gateway's per-server concurrency
# limit bounds the requests in flight, and a cap here would only queue them a second time. Idle
# connections are kept for as many calls as usually run at once (httpx2 keeps 20 by default, so
# a burst of 100 calls closed and reopened 80 connections per wave), and for 2 s: well under the
# idle timeout of common servers (uvicorn and Node 5 s), so a server never closes a connection
# while we are sending on it. When that race hit, the failed POST ended the SDK transport and
# with it every call in flight on the session (measured at 100 sessions, docs/benchmarks.md).
HTTP_LIMITS = httpx2.Limits(
    max_connections=None, max_keepalive_connections=128, keepalive_expiry=2.0
)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context (system CA bundle) for every HTTP client of this process.

    Building one loads the CA bundle: about 20 ms of CPU, four times what a whole health check of
    a loopback server costs otherwise. SSLContext is safe to share between connections.
    """
    return httpx2.create_ssl_context(trust_env=False)


def _meta_header_hook(meta_headers: Mapping[str, str]) -> Callable[[httpx2.Request], Any]:
    """A request hook that copies `params._meta` values of a JSON-RPC request into headers."""

    async def hook(request: httpx2.Request) -> None:
        if request.method != "POST":
            return
        try:
            message = json.loads(request.content or b"{}")
        except (ValueError, RuntimeError):  # not JSON, or a streamed body
            return
        meta = (message.get("params") or {}).get("_meta") if isinstance(message, dict) else None
        if not isinstance(meta, dict):
            return
        for key, header in meta_headers.items():
            value = meta.get(key)
            if isinstance(value, str):
                request.headers[header] = value

    return hook


def guarded_http_client(
    *,
    headers: Mapping[str, str],
    allowed_networks: Sequence[str],
    deadlines: Deadlines,
    meta_headers: Mapping[str, str] | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client for MCP traffic: our headers and timeouts, no proxy from the environment,
    and the network guard on every connection it opens."""
    transport = httpx2.AsyncHTTPTransport(
        trust_env=False, verify=_tls_context(), limits=HTTP_LIMITS
    )
    # httpx2 offers no public way to pass a network backend; the pool is created here, unused.
    transport._pool._network_backend = _GuardedBackend(allowed_networks)
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(deadlines.call, connect=deadlines.connect),
        transport=transport,
        trust_env=False,
        event_hooks={"request": [_meta_header_hook(meta_headers)]} if meta_headers else None,
    )


class McpConnection:
    """An open session to one server. Use it only from the task that opened it."""

    def __init__(
        self,
        client: Client,
        deadlines: Deadlines,
        stderr_tail: Callable[[], str],
        process_gone: anyio.Event | None = None,
        askers: _Askers | None = None,
    ) -> None:
        self._client = client
        self._askers = askers
        self._deadlines = deadlines
        self._stderr_tail = stderr_tail
        self._process_gone = process_gone
        self.identity = ServerIdentity(
            protocol_version=client.protocol_version,
            server_info=_wire(client.server_info) if client.server_info else {},
            capabilities=_wire(client.server_capabilities),
            instructions=client.instructions or "",
        )

    def stderr_tail(self) -> str:
        return self._stderr_tail()

    async def wait_process_gone(self) -> None:
        """Return when a local server's process has exited (its stderr pipe reached the end once
        every process holding it was gone) or a sandboxed server's container has (its attach
        stream ended). Never returns for remote servers."""
        if self._process_gone is None:
            await anyio.sleep_forever()
            return
        await self._process_gone.wait()

    @property
    def has_ping(self) -> bool:
        return self.identity.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS

    async def _call(self, what: str, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        method, _, subject = what.partition(" ")
        with mcp_span(method, attributes={"mcp.subject": subject} if subject else None):
            return await self._call_untraced(what, fn, timeout)

    async def _call_untraced(
        self, what: str, fn: Callable[[], Any], timeout: float | None = None
    ) -> Any:
        limit = timeout if timeout is not None else self._deadlines.call
        try:
            with anyio.fail_after(limit):
                return await fn()
        except TimeoutError as exc:
            raise McpFailure(
                "timeout",
                f"The server did not answer {what} within {limit:g} s.",
                stderr_tail=self.stderr_tail(),
            ) from exc
        except Exception as exc:
            raise _as_failure(exc, doing=what, stderr_tail=self.stderr_tail()) from exc

    async def _list_all(self, method: str, call: str, field_name: str) -> list[dict[str, Any]]:
        list_page = getattr(self._client, call)
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await self._call(method, functools.partial(list_page, cursor=cursor))
            items.extend(_wire(item) for item in getattr(page, field_name))
            if len(items) > MAX_LIST_ITEMS:
                raise McpFailure(
                    "protocol", f"The server listed more than {MAX_LIST_ITEMS} items for {method}."
                )
            cursor = page.next_cursor
            if not cursor:
                return items
            if cursor in seen_cursors:
                raise McpFailure("protocol", f"The server repeated a {method} pagination cursor.")
            seen_cursors.add(cursor)
        raise McpFailure("protocol", f"The server paginated {method} past {MAX_LIST_PAGES} pages.")

    def _has(self, capability: str) -> bool:
        return capability in self.identity.capabilities

    async def list_tools(self) -> list[dict[str, Any]]:
        return await self._list_all("tools/list", "list_tools", "tools")

    async def list_resources(self) -> list[dict[str, Any]]:
        if not self._has("resources"):
            return []
        resources = await self._list_all("resources/list", "list_resources", "resources")
        try:
            templates = await self._list_all(
                "resources/templates/list", "list_resource_templates", "resource_templates"
            )
        except McpFailure as exc:
            if exc.code != types.METHOD_NOT_FOUND:
                raise
            templates = []  # many servers offer resources without templates
        return resources + templates

    async def list_prompts(self) -> list[dict[str, Any]]:
        if not self._has("prompts"):
            return []
        return await self._list_all("prompts/list", "list_prompts", "prompts")

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        asker: Asker | None = None,
    ) -> dict[str, Any]:
        """Call a tool; `meta` goes into the request's `_meta` (e.g. a caller's identity, and the
        W3C `traceparent` of the call's span when tracing is on). On a session opened with
        `answer_questions`, a question the server asks during the call goes to `asker`."""
        with self._asking(asker):
            return await self._call_tool(name, arguments, timeout=timeout, meta=meta)

    @contextlib.contextmanager
    def _asking(self, asker: Asker | None) -> Any:
        if self._askers is None:
            yield
            return
        call_id = next(_call_ids)
        self._askers.in_flight[call_id] = asker
        token = _current_call.set(call_id)
        try:
            yield
        finally:
            _current_call.reset(token)
            del self._askers.in_flight[call_id]

    async def _call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        timeout: float | None,
        meta: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        with mcp_span("tools/call", meta=meta, attributes={"mcp.subject": name}) as sent:
            result = await self._call_untraced(
                f"tools/call {name}",
                lambda: self._client.call_tool(
                    name,
                    dict(arguments or {}),
                    meta=cast(types.RequestParamsMeta, sent) if sent else None,
                ),
                timeout=timeout,
            )
        return _wire(result)

    async def read_resource(self, uri: str, *, timeout: float | None = None) -> dict[str, Any]:
        result = await self._call(
            f"resources/read {uri}", lambda: self._client.read_resource(uri), timeout=timeout
        )
        return _wire(result)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        result = await self._call(
            f"prompts/get {name}",
            lambda: self._client.get_prompt(name, dict(arguments or {})),
            timeout=timeout,
        )
        return _wire(result)

    async def ping(self) -> None:
        if not self.has_ping:
            raise McpFailure(
                "protocol",
                f"Protocol {self.identity.protocol_version} has no ping; check health with "
                "tools/list or a harmless tool call instead.",
            )
        await self._call("ping", self._client.session.send_ping)


def _as_failure(exc: BaseException, *, doing: str, stderr_tail: str = "") -> McpFailure:
    """Map whatever the SDK, httpx2, anyio or the OS raised onto one McpFailure."""
    if isinstance(exc, McpFailure):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        if inner:
            return _as_failure(inner[0], doing=doing, stderr_tail=stderr_tail)
    if isinstance(exc, SandboxError):
        # A sandboxed server's container could not start, or ended (OOM kill, exit): the message
        # (and the container's fate) says which.
        kind: FailureKind = "closed" if exc.fate is not None else "spawn"
        return McpFailure(kind, exc.message, stderr_tail=stderr_tail or _fate_tail(exc))
    if isinstance(exc, FileNotFoundError):
        return McpFailure(
            "spawn", f"The command was not found: {exc.filename or exc}.", stderr_tail=stderr_tail
        )
    if isinstance(exc, PermissionError):
        return McpFailure("spawn", f"The command cannot be run: {exc}.", stderr_tail=stderr_tail)
    if isinstance(exc, MCPError) and exc.error.code == types.CONNECTION_CLOSED:
        return McpFailure(
            "closed",
            f"The server closed the connection while {doing}.",
            stderr_tail=stderr_tail,
            code=exc.error.code,
        )
    if isinstance(exc, MCPError):
        return McpFailure(
            "protocol",
            f"The server answered {doing} with MCP error {exc.error.code}: {exc.error.message}",
            stderr_tail=stderr_tail,
            code=exc.error.code,
        )
    if isinstance(exc, httpx2.ConnectError | httpcore2.ConnectError):
        text = str(exc)
        kind = "refused" if "TOOLROOM_ALLOWED_NETWORKS" in text else "connect"
        return McpFailure(kind, f"Could not connect while {doing}: {text}", stderr_tail=stderr_tail)
    if isinstance(exc, httpx2.HTTPStatusError):
        return McpFailure(
            "connect",
            f"The server answered {doing} with HTTP {exc.response.status_code}.",
            stderr_tail=stderr_tail,
        )
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return McpFailure("timeout", f"Timed out while {doing}.", stderr_tail=stderr_tail)
    if isinstance(exc, httpx2.LocalProtocolError | httpx2.UnsupportedProtocol | httpx2.ProxyError):
        # The request could not even be sent.
        return McpFailure("connect", f"HTTP error while {doing}: {exc}", stderr_tail=stderr_tail)
    if isinstance(exc, httpx2.HTTPError):
        # The connection was open: the request may have reached the server before it dropped
        # (read/write errors, a server that closed without answering). Not provably unsent.
        return McpFailure(
            "closed", f"The connection dropped while {doing}: {exc}", stderr_tail=stderr_tail
        )
    if isinstance(
        exc,
        anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream
        | ConnectionError
        | EOFError,
    ):
        return McpFailure(
            "closed", f"The server closed the connection while {doing}.", stderr_tail=stderr_tail
        )
    if isinstance(exc, ValueError):
        return McpFailure(
            "protocol",
            f"The server sent something that is not MCP while {doing}: {exc}",
            stderr_tail=stderr_tail,
        )
    return McpFailure(
        "protocol", f"{type(exc).__name__} while {doing}: {exc}", stderr_tail=stderr_tail
    )


def _fate_tail(exc: SandboxError) -> str:
    return "\n".join(exc.fate.stderr_tail) if exc.fate is not None else ""


def _open_transport(
    target: Target, deadlines: Deadlines, stderr_writer: TextIO | None
) -> Transport:
    if isinstance(target, StdioTarget):
        if stderr_writer is None:
            raise RuntimeError("a stdio target needs a stderr pipe")
        if not target.argv:
            raise McpFailure("spawn", "The server has no command to run.")
        params = StdioServerParameters(
            command=target.argv[0],
            args=list(target.argv[1:]),
            env=dict(target.env),
            cwd=target.cwd or None,
        )
        return stdio_client(params, errlog=stderr_writer)
    if isinstance(target, HttpTarget):
        if target.transport == "sse":

            def factory(
                headers: dict[str, str] | None = None,
                timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None,
            ) -> httpx2.AsyncClient:
                return guarded_http_client(
                    headers={**(headers or {}), **target.headers},
                    allowed_networks=target.allowed_networks,
                    deadlines=deadlines,
                )

            return sse_client(
                target.url,
                timeout=deadlines.connect,
                sse_read_timeout=max(deadlines.call, 300),
                httpx_client_factory=factory,
            )
        client = guarded_http_client(
            headers=target.headers,
            allowed_networks=target.allowed_networks,
            deadlines=deadlines,
            meta_headers=target.meta_headers,
        )
        return _owning_client(streamable_http_client(target.url, http_client=client), client)
    return target.open_transport()


@contextlib.asynccontextmanager
async def _owning_client(transport: Transport, client: httpx2.AsyncClient) -> AsyncIterator[Any]:
    """Close the HTTP client we created once the transport is done with it."""
    async with client, transport as streams:
        yield streams


@contextlib.asynccontextmanager
async def connect(
    target: Target,
    *,
    deadlines: Deadlines | None = None,
    mode: str = "auto",
    answer_questions: bool = False,
) -> AsyncIterator[McpConnection]:
    """Open a session to `target`, negotiating the 2026-07-28 protocol or the handshake.

    With `answer_questions` the client declares elicitation and passes a server's question to
    the asker of the call it belongs to (`McpConnection.call_tool(asker=...)`).

    Raises McpFailure when the server cannot be started or reached, or does not complete the
    handshake within `deadlines.connect` seconds.
    """
    deadlines = deadlines or Deadlines()
    stderr = _StderrTail() if isinstance(target, StdioTarget) else None

    def tail() -> str:
        if stderr is not None:
            return stderr.text()
        if isinstance(target, TransportTarget):
            return target.stderr_tail()
        return ""

    doing = f"connecting to {target.describe()}"
    askers = _Askers() if answer_questions else None
    connected = False
    body_error: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:
            if stderr is not None:
                group.start_soon(stderr.pump)
            try:
                with anyio.CancelScope() as connect_scope:
                    # Only the handshake runs under the connect deadline; calls get their own.
                    connect_scope.deadline = anyio.current_time() + deadlines.connect
                    transport = _open_transport(
                        target, deadlines, stderr.writer if stderr else None
                    )
                    async with Client(
                        transport,
                        mode=mode,
                        cache=None,
                        client_info=CLIENT_INFO,
                        read_timeout_seconds=deadlines.call,
                        elicitation_callback=askers.elicit if askers is not None else None,
                    ) as client:
                        connect_scope.deadline = math.inf
                        connected = True
                        if stderr is not None:
                            stderr.close_write_end()
                        try:
                            if stderr is not None:
                                gone: anyio.Event | None = stderr.eof
                            elif isinstance(transport, SandboxTransport):
                                gone = transport.exited
                            else:
                                gone = None
                            yield McpConnection(client, deadlines, tail, gone, askers)
                        except BaseException as exc:
                            body_error = exc
                            raise
                if connect_scope.cancelled_caught and not connected:
                    raise McpFailure(
                        "timeout",
                        f"The server did not complete the MCP handshake within "
                        f"{deadlines.connect:g} s.",
                        stderr_tail=tail(),
                    )
            finally:
                if stderr is not None:
                    stderr.close_write_end()
                group.cancel_scope.cancel()
    except BaseException as exc:
        # The caller's own errors (and McpFailures from calls) come back as they were raised,
        # not wrapped in the task groups' exception groups.
        if body_error is not None and _contains(exc, body_error):
            raise body_error from None
        if _is_cancellation(exc):
            raise
        if isinstance(exc, McpFailure):
            raise
        raise _as_failure(exc, doing=doing, stderr_tail=tail()) from exc
    finally:
        if stderr is not None:
            stderr.close()


def _contains(exc: BaseException, wanted: BaseException) -> bool:
    if exc is wanted:
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains(inner, wanted) for inner in exc.exceptions)
    return False


def _is_cancellation(exc: BaseException) -> bool:
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancellation(inner) for inner in exc.exceptions)
    return isinstance(exc, cancelled | KeyboardInterrupt | SystemExit | GeneratorExit)


async def probe_tools_list(connection: McpConnection) -> int:
    """A health probe every protocol generation answers: list the tools; return how many."""
    return len(await connection.list_tools())


def elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)
