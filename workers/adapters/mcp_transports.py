"""Opening a transport to an MCP server: stdio with a bounded stderr tail, HTTP through the network
guard, or the target's own transport."""

from __future__ import annotations

import contextlib
import json
import os
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TextIO

import anyio
import httpx2
from mcp import StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from workers.adapters.guarded_http import guarded_transport
from workers.adapters.mcp_targets import (
    Deadlines,
    HttpTarget,
    McpFailure,
    StdioTarget,
    Target,
)

# Safety limits on how much of a stdio server's stderr we hold.
STDERR_TAIL_LINES = 200
STDERR_LINE_CHARS = 1000


class StderrTail:
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
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client for MCP traffic: our headers and timeouts, no proxy from the environment,
    and the network guard on every connection it opens."""
    transport = guarded_transport(allowed_networks=allowed_networks, limits=HTTP_LIMITS)
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(deadlines.call, connect=deadlines.connect),
        transport=transport,
        auth=auth,
        trust_env=False,
        event_hooks={"request": [_meta_header_hook(meta_headers)]} if meta_headers else None,
    )


def open_transport(target: Target, deadlines: Deadlines, stderr_writer: TextIO | None) -> Transport:
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
                    auth=target.auth,
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
            auth=target.auth,
        )
        return _owning_client(streamable_http_client(target.url, http_client=client), client)
    return target.open_transport()


@contextlib.asynccontextmanager
async def _owning_client(transport: Transport, client: httpx2.AsyncClient) -> AsyncIterator[Any]:
    """Close the HTTP client we created once the transport is done with it."""
    async with client, transport as streams:
        yield streams
