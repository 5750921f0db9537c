"""TCP_NODELAY on every connection uvicorn accepts, whoever bound the listener (the 40 ms stall).

uvicorn's `--workers N` listener is bound by `Config.bind_socket()` (proto 0), so asyncio leaves
Nagle's algorithm on for its connections; `NoDelayHTTPProtocol` turns it off itself. These tests
serve on exactly that listener with a real uvicorn protocol and read the option back from the
accepted socket; the stall itself is measured by bench/catalogue (20 tools, one and two workers).
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import uvicorn
import yaml
from uvicorn.server import ServerState

from registry.core.http_protocol import NoDelayHTTPProtocol, set_nodelay

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = "registry.core.http_protocol:NoDelayHTTPProtocol"


async def _app(scope, receive, send):  # pragma: no cover (never called: no request is sent)
    raise AssertionError("no request expected")


async def _accepted_nodelay(protocol_factory) -> int:
    """Serve on uvicorn's own `--workers` listener, connect once, return the accepted socket's
    TCP_NODELAY as the server side sees it."""
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=NoDelayHTTPProtocol)
    config.load()
    listener = config.bind_socket()
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol_factory(config=config, server_state=state, app_state={}), sock=listener
    )
    try:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(200):
            if state.connections:
                break
            await asyncio.sleep(0.01)
        (protocol,) = state.connections
        accepted = protocol.transport.get_extra_info("socket")
        value: int = accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        writer.close()
        return value
    finally:
        server.close()
        await server.wait_closed()


def test_connections_on_the_workers_listener_get_tcp_nodelay():
    assert asyncio.run(_accepted_nodelay(NoDelayHTTPProtocol)) != 0


def test_set_nodelay_leaves_sockets_without_tcp_alone():
    class Transport(asyncio.BaseTransport):
        def __init__(self, sock: socket.socket | None) -> None:
            super().__init__()
            self.sock = sock

        def get_extra_info(self, name, default=None):
            return self.sock if name == "socket" else default

    left, right = socket.socketpair()
    try:
        assert set_nodelay(Transport(left)) is False  # a Unix socket has no Nagle to turn off
        assert set_nodelay(Transport(None)) is False
    finally:
        left.close()
        right.close()


def test_the_production_commands_serve_with_the_protocol():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert f"--http={PROTOCOL}" in compose["services"]["web"]["command"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = next(line for line in dockerfile.splitlines() if line.startswith("CMD"))
    cmd_end = dockerfile[dockerfile.index(cmd) :].split("]", 1)[0]
    assert f'"--http", "{PROTOCOL}"' in cmd_end
