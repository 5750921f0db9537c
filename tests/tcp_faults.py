"""Real listening sockets between Toolroom and what it talks to, for fault tests: a proxy in front
of an MCP server over HTTP (retry tests) and a TCP relay in front of PostgreSQL (outage tests).

Every TCP connection the proxy accepts is timestamped. In mode `refuse` it closes each connection at
once without reading a byte (the request provably never reached a server). In mode `drop_calls`
it passes requests through to the server (one request per connection: `Connection: close`), but
for a `tools/call` it waits until the server has started answering (the call reached it) and then
closes the client's connection without passing anything back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from typing import Any


class FaultyProxy:
    def __init__(self, upstream_port: int, *, mode: str) -> None:
        self.upstream_port = upstream_port
        self.mode = mode
        self.accepted: list[float] = []
        self.calls_dropped = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()
            async with self.server:
                await self.server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            self.loop.run_until_complete(serve())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.append(time.monotonic())
        try:
            if self.mode == "refuse":
                return
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            lines = head.decode("latin-1").split("\r\n")
            kept = [lines[0]]
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value.strip())
                if name.lower() in ("connection", "keep-alive") or not line:
                    continue
                kept.append(line)
            body = await reader.readexactly(length) if length else b""
            request = ("\r\n".join([*kept, "Connection: close"]) + "\r\n\r\n").encode() + body
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            up_writer.write(request)
            await up_writer.drain()
            if b'"tools/call"' in body:
                await up_reader.read(1)  # the server answers: the call reached it
                self.calls_dropped += 1
                up_writer.close()
                return  # and the client gets nothing
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
            up_writer.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    def intervals(self) -> list[float]:
        return [round(b - a, 2) for a, b in itertools.pairwise(self.accepted)]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class TcpRelay:
    """A plain TCP relay to 127.0.0.1:`upstream_port` (PostgreSQL, for outage tests) on a port
    of its own. `cut()` makes the upstream unreachable through it: every relayed connection is
    aborted and new ones are refused (nothing listens); `restore()` listens again on the same
    port."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.restore()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def restore(self) -> None:
        async def listen() -> None:
            self.server = await asyncio.start_server(
                self._connection, "127.0.0.1", self.port, reuse_address=True
            )
            self.port = self.server.sockets[0].getsockname()[1]

        self._run(listen())

    def cut(self) -> None:
        async def close() -> None:
            if self.server is not None:
                self.server.close()
                self.server = None
            for writer in list(self.writers):
                writer.transport.abort()
            self.writers.clear()

        self._run(close())

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self.writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self.writers.difference_update((writer, up_writer))

    def stop(self) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
