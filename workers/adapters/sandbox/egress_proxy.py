"""The sandbox's allowlisting egress proxy: HTTP CONNECT and plain HTTP, standard library only.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import re
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from registry.core.netguard import resolved_address_refusal

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 600.0
MAX_CONNECTIONS = 256
# Request headers a proxy consumes instead of passing on (RFC 9110 section 7.6.1). The body is
# relayed as it comes, so Transfer-Encoding stays with it.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")
_ABSOLUTE_HTTP = re.compile(r"^http://(?P<authority>[^/?#\s]+)(?P<rest>[/?][^\s]*)?$", re.I)

Resolver = Callable[[str, int], Awaitable[list[str]]]


class Refused(Exception):
    """A request the proxy answers with an error status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def normalise_host(host: str) -> str:
    """Lower-case, no trailing dot, IPv6 without brackets and in canonical form."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return host


def parse_host_port(text: str, *, default_port: int | None = None) -> tuple[str, int]:
    match = _HOST_PORT.match(text.strip())
    if match:
        host, port = match["host"], int(match["port"])
    elif default_port is not None and re.match(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)$", text):
        host, port = text, default_port
    else:
        raise Refused(400, f"{text!r} is not host:port")
    if not 0 < port < 65536:
        raise Refused(400, f"port {port} is out of range")
    return normalise_host(host), port


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def forbidden_address(address: str) -> str | None:
    """Why a listed *name* may not lead to `address`, or None: the URL guard's rule."""
    return resolved_address_refusal(address)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass
class Allowlist:
    entries: frozenset[tuple[str, int]] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Allowlist:
        return cls(frozenset(parse_host_port(text) for text in texts))

    def allows(self, host: str, port: int) -> bool:
        return (host, port) in self.entries


@dataclass
class Proxy:
    allowlist: Allowlist
    resolver: Resolver = system_resolver
    forbidden: Callable[[str], str | None] = forbidden_address
    connect_timeout: float = CONNECT_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONNECTIONS))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._slots.locked():
                await _respond(writer, 503, "the proxy is busy")
                return
            async with self._slots:
                await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            await _respond(writer, 431, "the request head is too large")
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await _respond(writer, 400, "not an HTTP/1.x request")
            return
        method, target, version = parts
        try:
            if method == "CONNECT":
                host, port = parse_host_port(target)
                upstream = await self._open(method, host, port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._relay(reader, writer, *upstream)
                return
            match = _ABSOLUTE_HTTP.match(target)
            if not match:
                raise Refused(400, "only CONNECT and absolute http:// requests are proxied")
            host, port = parse_host_port(match["authority"].rsplit("@", 1)[-1], default_port=80)
            upstream = await self._open(method, host, port)
        except Refused as refused:
            self.log(f"deny {method} {target}: {refused.reason}")
            await _respond(writer, refused.status, refused.reason)
            return
        up_reader, up_writer = upstream
        headers = [line for line in lines[1:] if line]
        up_writer.write(_forward_head(method, match["rest"] or "/", version, headers))
        await self._relay(reader, writer, up_reader, up_writer)

    async def _open(
        self, method: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # The allowlist is checked before any name is looked up: a denied name never reaches DNS.
        if not self.allowlist.allows(host, port):
            raise Refused(403, f"{host}:{port} is not on this server's egress allowlist")
        if is_ip(host):
            addresses = [host]
        else:
            try:
                addresses = await asyncio.wait_for(self.resolver(host, port), self.connect_timeout)
            except (OSError, TimeoutError) as exc:
                raise Refused(502, f"{host} could not be resolved ({exc})") from exc
            for address in addresses:
                if (why := self.forbidden(address)) is not None:
                    raise Refused(
                        403, f"{host} resolves to {address} ({why}), which no listed name may reach"
                    )
        last: Exception | None = None
        for address in addresses:
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(address, port), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            self.log(f"allow {method} {host}:{port} via {address}")
            return upstream
        raise Refused(502, f"{host}:{port} did not accept the connection ({last})")

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pipe(reader, up_writer))
                group.create_task(self._pipe(up_reader, writer))
        except* (ConnectionError, TimeoutError):
            pass
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while True:
            data = await asyncio.wait_for(source.read(65536), self.idle_timeout)
            if not data:
                break
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()


def _forward_head(method: str, path: str, version: str, headers: Sequence[str]) -> bytes:
    named = [(line.split(":", 1)[0].strip().lower(), line) for line in headers if ":" in line]
    listed = {
        token.strip().lower()
        for name, line in named
        if name in ("connection", "proxy-connection")
        for token in line.split(":", 1)[1].split(",")
    }
    kept = [line for name, line in named if name not in _HOP_BY_HOP and name not in listed]
    head = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(head).encode("latin-1")


async def _respond(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    titles = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large"}
    titles |= {502: "Bad Gateway", 503: "Service Unavailable"}
    body = f"Toolroom egress proxy: {reason}\n".encode()
    head = (
        f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode() + body)
        await writer.drain()


async def _wait_for_stdin_eof() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


async def start_server(proxy: Proxy, host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD_BYTES)


async def serve(proxy: Proxy, host: str, port: int, *, lifeline_stdin: bool = False) -> None:
    server = await start_server(proxy, host, port)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        if lifeline_stdin:
            await _wait_for_stdin_eof()
            proxy.log("stdin closed: the worker is gone, stopping")
        else:
            await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--listen", default="0.0.0.0:3128", help="address:port to listen on")
    parser.add_argument("--allow", action="append", default=[], help="host:port, repeatable")
    parser.add_argument("--lifeline-stdin", action="store_true", help="exit when stdin closes")
    parser.add_argument("--connect-timeout", type=float, default=CONNECT_TIMEOUT)
    args = parser.parse_args(argv)
    listen_host, _, listen_port = args.listen.rpartition(":")
    try:
        allowlist = Allowlist.parse(args.allow)
    except Refused as exc:
        parser.error(f"--allow: {exc.reason}")
    proxy = Proxy(allowlist, connect_timeout=args.connect_timeout)
    proxy.log(f"allowlist: {', '.join(sorted(f'{h}:{p}' for h, p in allowlist.entries)) or '-'}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(proxy, listen_host, int(listen_port), lifeline_stdin=args.lifeline_stdin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
