"""uvicorn's HTTP protocol with TCP_NODELAY set on every connection, however the listener was made.

Why: asyncio turns Nagle's algorithm off (TCP_NODELAY) for an accepted socket only when the socket
says `proto == IPPROTO_TCP`. uvicorn with one worker lets asyncio build the listener from
`getaddrinfo` (proto 6), but `--workers N` (and the gunicorn worker) bind the listener themselves
with `socket.socket(family)`, proto 0, and accepted sockets inherit it: Nagle stays on. uvicorn
writes a response's headers and its body in two `send`s, so the body (a second small segment)
waits for the client's ACK of the headers, which Linux delays by about 40 ms: with two workers a
small cached catalogue took a flat 44 ms instead of 7 ms (docs/benchmarks.md, "The 40 ms stall";
upstream: Kludex/uvicorn#3149).

Serve with `uvicorn registry.asgi:application --http
registry.core.http_protocol:NoDelayHTTPProtocol` (the Dockerfile and docker-compose.yml do).
The class is uvicorn's own choice of implementation (httptools when installed, else h11);
only `connection_made` differs.
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
