"""uvicorn's HTTP protocol with TCP_NODELAY set on every connection, however the listener was made.

More: docs/operations.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.auto import AutoHTTPProtocol

_TCP_FAMILIES = frozenset({socket.AF_INET, socket.AF_INET6})


def set_nodelay(transport: asyncio.BaseTransport) -> bool:
    """Turn Nagle's algorithm off on a transport's TCP socket; False if it has none (a Unix
    socket, a test transport)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in _TCP_FAMILIES:
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # the peer is already gone; the protocol notices on its own
        return False
    return True


class NoDelayHTTPProtocol(AutoHTTPProtocol):  # type: ignore[valid-type,misc]
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        set_nodelay(transport)
        super().connection_made(transport)
