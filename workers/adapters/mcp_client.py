"""Sessions to MCP servers over stdio, Streamable HTTP, legacy SSE or any SDK transport.

More: docs/workers.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio
import httpcore2
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.shared.dispatcher import ProgressFnT
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from registry.core.tracing import mcp_span
from workers.adapters.askers import Asker, Askers, AskRefused, call_ids, current_call
from workers.adapters.call_log import CallLog
from workers.adapters.guarded_http import GUARD_REFUSAL_MARK
from workers.adapters.mcp_targets import (
    Deadlines,
    FailureKind,
    HttpTarget,
    McpFailure,
    StdioTarget,
    Target,
    TransportTarget,
)
from workers.adapters.mcp_transports import StderrTail, open_transport
from workers.adapters.sandbox.errors import SandboxError
from workers.adapters.sandbox.transport import SandboxTransport
from workers.adapters.tools_changed import (
    ToolsWatch,
    listen_tools_changed,
    tools_changed_handler,
)

# The client's API; the targets, deadlines and McpFailure live in mcp_targets.py.
__all__ = [
    "CLIENT_INFO",
    "AskRefused",
    "Asker",
    "CallLog",
    "Deadlines",
    "FailureKind",
    "HttpTarget",
    "McpConnection",
    "McpFailure",
    "ServerIdentity",
    "StdioTarget",
    "Target",
    "ToolsWatch",
    "TransportTarget",
    "connect",
    "elapsed_ms",
    "mode_for",
    "probe_tools_list",
]

CLIENT_INFO = types.Implementation(name="toolroom", version="0.1.0")

# Safety limits on what a server may make us hold in memory.
MAX_LIST_PAGES = 1000
MAX_LIST_ITEMS = 100_000


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


class McpConnection:
    """An open session to one server. Use it only from the task that opened it."""

    def __init__(
        self,
        client: Client,
        deadlines: Deadlines,
        stderr_tail: Callable[[], str],
        process_gone: anyio.Event | None = None,
        askers: Askers | None = None,
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

    @property
    def process_gone(self) -> bool:
        """Whether a local server's process (a sandboxed server's container) has exited."""
        return self._process_gone is not None and self._process_gone.is_set()

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

    async def _list_optional(
        self, capability: str, method: str, call: str, key: str
    ) -> list[dict[str, Any]]:
        """List what the server offers under an optional capability. A session adopted at a
        modern version without the `server/discover` probe knows no capabilities: it asks, and a
        server without the method offers none (else a rediscovery would drop every resource and
        prompt the first discovery stored)."""
        if self._has(capability):
            return await self._list_all(method, call, key)
        if self.identity.capabilities:
            return []
        try:
            return await self._list_all(method, call, key)
        except McpFailure as exc:
            if exc.code != types.METHOD_NOT_FOUND:
                raise
            return []

    async def list_resources(self) -> list[dict[str, Any]]:
        resources = await self._list_optional(
            "resources", "resources/list", "list_resources", "resources"
        )
        if self.identity.capabilities and not self._has("resources"):
            return []
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
        return await self._list_optional("prompts", "prompts/list", "list_prompts", "prompts")

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        asker: Asker | None = None,
        progress: ProgressFnT | None = None,
        log: CallLog | None = None,
    ) -> dict[str, Any]:
        """Call a tool; `meta` goes into the request's `_meta` (e.g. a caller's identity, and the
        W3C `traceparent` of the call's span when tracing is on). What the server asks of the
        caller during the call (elicitation, sampling, roots) goes to `asker` (none: refused); with
        `progress`, the request carries a progress token and the server's reports go there; with
        `log`, the server's log messages of the call at `log.level` or above go there (a
        2026-07-28 request opts in with that level in its `_meta`)."""
        if log is not None and self.identity.protocol_version in MODERN_PROTOCOL_VERSIONS:
            meta = {**(meta or {}), types.LOG_LEVEL_META_KEY: log.level}
        with self._asking(asker, log):
            return await self._call_tool(name, arguments, timeout=timeout, meta=meta, p=progress)

    @contextlib.contextmanager
    def _asking(self, asker: Asker | None, log: CallLog | None = None) -> Any:
        if self._askers is None:
            yield
            return
        call_id = next(call_ids)
        self._askers.in_flight[call_id] = asker
        if log is not None:
            self._askers.logs[call_id] = log
        token = current_call.set(call_id)
        try:
            yield
        finally:
            current_call.reset(token)
            del self._askers.in_flight[call_id]
            self._askers.logs.pop(call_id, None)

    async def _call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        timeout: float | None,
        meta: Mapping[str, Any] | None,
        p: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        with mcp_span("tools/call", meta=meta, attributes={"mcp.subject": name}) as sent:
            result = await self._call_untraced(
                f"tools/call {name}",
                lambda: self._client.call_tool(
                    name,
                    dict(arguments or {}),
                    progress_callback=p,
                    meta=cast(types.RequestParamsMeta, sent) if sent else None,
                ),
                timeout=timeout,
            )
        return _wire(result)

    async def read_resource(self, uri: str, *, timeout: float | None = None) -> dict[str, Any]:
        # In flight without an asker: what the server asks meanwhile is refused, and it counts
        # as a call, so no tool call's caller is taken to be the one asked.
        with self._asking(None):
            result = await self._call(
                f"resources/read {uri}", lambda: self._client.read_resource(uri), timeout=timeout
            )
        return _wire(result)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        with self._asking(None):  # as read_resource
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
        kind = "refused" if GUARD_REFUSAL_MARK in text else "connect"
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


@contextlib.asynccontextmanager
async def connect(
    target: Target,
    *,
    deadlines: Deadlines | None = None,
    mode: str = "auto",
    watch_tools: ToolsWatch | None = None,
) -> AsyncIterator[McpConnection]:
    """Open a session to `target`, negotiating the 2026-07-28 protocol or the handshake.

    The client declares what the gateway can relay (elicitation, sampling, roots), on every
    session alike: discovery, health checks and calls see the same tools (a server may offer a
    tool only to clients that declare it). A server's question, sampling or roots request goes
    to the asker of the call it belongs to (`McpConnection.call_tool(asker=...)`, askers.py); a
    call without one, or a request outside any call, is refused.
    With `watch_tools`, the server's word that its tools changed (`notifications/tools/
    list_changed` on a handshake session, a `subscriptions/listen` event on a 2026-07-28 one)
    calls it (it must not block: it only schedules work).

    Raises McpFailure when the server cannot be started or reached, or does not complete the
    handshake within `deadlines.connect` seconds.
    """
    deadlines = deadlines or Deadlines()
    stderr = StderrTail() if isinstance(target, StdioTarget) else None

    def tail() -> str:
        if stderr is not None:
            return stderr.text()
        if isinstance(target, TransportTarget):
            return target.stderr_tail()
        return ""

    doing = f"connecting to {target.describe()}"
    askers = Askers(
        request_scoped=isinstance(target, HttpTarget) and target.transport == "streamable_http"
    )
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
                    transport = open_transport(target, deadlines, stderr.writer if stderr else None)
                    async with Client(
                        transport,
                        mode=mode,
                        cache=None,
                        client_info=CLIENT_INFO,
                        read_timeout_seconds=deadlines.call,
                        elicitation_callback=askers.elicit,
                        sampling_callback=askers.sample,
                        list_roots_callback=askers.roots,
                        logging_callback=askers.log,
                        message_handler=tools_changed_handler(watch_tools),
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
                            connection = McpConnection(client, deadlines, tail, gone, askers)
                            if watch_tools is None:
                                yield connection
                            else:
                                async with listen_tools_changed(
                                    client, connection.identity, watch_tools
                                ):
                                    yield connection
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
