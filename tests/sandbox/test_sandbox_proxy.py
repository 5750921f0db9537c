"""The egress proxy on this host: allowlisted CONNECT and HTTP pass, everything else is refused.

Every connection targets 127.0.0.1. Names are never looked up for real (no DNS from tests): where a
test needs a name to resolve, it hands the proxy a stub resolver and says so.
"""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from workers.adapters.sandbox import egress_proxy
from workers.adapters.sandbox.egress_proxy import Allowlist, Proxy, Refused
from workers.adapters.sandbox.images.proxy import proxy_program_files
from workers.adapters.sandbox.networks import proxy_command

pytestmark = pytest.mark.anyio


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        Recorder.seen.append({"path": self.path, **dict(self.headers.items())})
        body = b"hello through the proxy"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[int]:
    """A local HTTP server the proxy may be allowed to reach; its port."""
    Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
async def echo_port():
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


class CountingResolver:
    """A stub resolver (no real DNS from tests): answers from a table and counts the lookups."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table = table or {}
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"{host} is not in the stub's table")
        return self.table[host]


async def running(proxy: Proxy):
    server = await egress_proxy.start_server(proxy, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def exchange(port: int, request: bytes, then: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    rest = b""
    if then:
        writer.write(then)
        await writer.drain()
        rest = await asyncio.wait_for(reader.readexactly(len(then)), 5)
    elif b"Content-Length" in head:
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        rest = await asyncio.wait_for(reader.readexactly(length), 5)
    writer.close()
    return head + rest


async def test_an_allowlisted_connect_is_tunnelled(echo_port):
    logged: list[str] = []
    proxy = Proxy(Allowlist.parse([f"127.0.0.1:{echo_port}"]), log=logged.append)
    server, port = await running(proxy)
    async with server:
        reply = await exchange(
            port, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode(), then=b"ping"
        )
    assert reply.startswith(b"HTTP/1.1 200")
    assert reply.endswith(b"ping")
    assert logged == [f"allow CONNECT 127.0.0.1:{echo_port} via 127.0.0.1"]


async def test_a_name_not_on_the_allowlist_is_refused_before_any_lookup():
    resolver = CountingResolver()
    logged: list[str] = []
    proxy = Proxy(Allowlist.parse(["api.example.test:443"]), resolver=resolver, log=logged.append)
    server, port = await running(proxy)
    async with server:
        reply = await exchange(port, b"CONNECT exfil.invalid:443 HTTP/1.1\r\n\r\n")
        other_port = await exchange(port, b"CONNECT api.example.test:22 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
    assert b"exfil.invalid:443 is not on this server's egress allowlist" in reply
    assert other_port.startswith(b"HTTP/1.1 403")
    assert resolver.lookups == []
    assert logged[0].startswith("deny CONNECT exfil.invalid:443")


async def test_a_listed_name_that_resolves_to_loopback_or_metadata_is_refused():
    # Stub resolver: a listed name pointing at this host or the cloud metadata address.
    resolver = CountingResolver({"sneaky.test": ["127.0.0.1"], "meta.test": ["169.254.169.254"]})
    proxy = Proxy(
        Allowlist.parse(["sneaky.test:80", "meta.test:80"]), resolver=resolver, log=lambda _: None
    )
    server, port = await running(proxy)
    async with server:
        loopback = await exchange(port, b"CONNECT sneaky.test:80 HTTP/1.1\r\n\r\n")
        metadata = await exchange(port, b"GET http://meta.test/latest HTTP/1.1\r\n\r\n")
    assert loopback.startswith(b"HTTP/1.1 403")
    assert b"resolves to 127.0.0.1" in loopback
    assert metadata.startswith(b"HTTP/1.1 403")
    assert resolver.lookups == ["sneaky.test", "meta.test"]


async def test_a_listed_name_goes_to_the_address_that_was_checked(origin):
    # Stub resolver, and loopback allowed for names only in this test: the plumbing is the point.
    resolver = CountingResolver({"origin.test": ["127.0.0.1"]})
    proxy = Proxy(
        Allowlist.parse([f"origin.test:{origin}"]),
        resolver=resolver,
        forbidden=lambda _address: None,
        log=lambda _: None,
    )
    server, port = await running(proxy)
    async with server:
        reply = await exchange(port, f"GET http://origin.test:{origin}/x HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200"))
    assert resolver.lookups == ["origin.test"]


async def test_plain_http_is_forwarded_without_the_proxys_own_headers(origin):
    proxy = Proxy(Allowlist.parse([f"127.0.0.1:{origin}"]), log=lambda _: None)
    server, port = await running(proxy)
    request = (
        f"GET http://127.0.0.1:{origin}/path?q=1 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{origin}\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\n"
        "Proxy-Connection: keep-alive\r\n"
        "X-Kept: yes\r\n\r\n"
    ).encode()
    async with server:
        reply = await exchange(port, request)
    assert b" 200 " in reply.split(b"\r\n")[0]
    assert reply.endswith(b"hello through the proxy")
    (seen,) = Recorder.seen
    assert seen["path"] == "/path?q=1"
    assert seen["X-Kept"] == "yes"
    assert "Proxy-Authorization" not in seen
    assert seen["Connection"] == "close"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", b"400"),
        (b"HELLO\r\n\r\n", b"400"),
        (b"CONNECT nonsense HTTP/1.1\r\n\r\n", b"400"),
        (b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
    ],
)
async def test_requests_that_are_not_proxy_requests_are_refused(request_bytes, status):
    proxy = Proxy(Allowlist.parse(["127.0.0.1:1"]), log=lambda _: None)
    server, port = await running(proxy)
    async with server:
        reply = await exchange(port, request_bytes)
    assert reply.split(b" ")[1] == status


async def test_an_allowlisted_port_with_nothing_listening_is_a_bad_gateway():
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    closed_port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    proxy = Proxy(Allowlist.parse([f"127.0.0.1:{closed_port}"]), log=lambda _: None)
    server, port = await running(proxy)
    async with server:
        reply = await exchange(port, f"CONNECT 127.0.0.1:{closed_port} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 502")


def test_allowlist_entries_are_normalised():
    allowlist = Allowlist.parse(["API.Example.test.:443", "[::1]:8080"])
    assert allowlist.allows("api.example.test", 443)
    assert allowlist.allows("::1", 8080)
    assert not allowlist.allows("api.example.test", 80)
    with pytest.raises(Refused):
        Allowlist.parse(["no-port"])


def test_the_proxy_program_says_ready_and_exits_when_its_stdin_closes(tmp_path):
    """The program as the proxy image lays it out and runs it: its files alone (the network
    guard beside it), the standard library only."""
    for path, content in proxy_program_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(content)
    started = time.monotonic()
    process = subprocess.Popen(
        [
            sys.executable,
            *proxy_command([])[1:4],  # the interpreter's options, as the image runs it
            str(tmp_path / "egress_proxy.py"),
            "--listen",
            "127.0.0.1:0",
            "--allow",
            "127.0.0.1:9",
            "--lifeline-stdin",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("READY ")
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=10) == 0
        assert process.stderr is not None
        assert "stdin closed" in process.stderr.read()
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert time.monotonic() - started < 10


def test_a_bad_allowlist_entry_stops_the_program():
    with pytest.raises(SystemExit) as stopped:
        egress_proxy.main(["--allow", "not-host-port"])
    assert stopped.value.code == 2
