"""The one guarded way Toolroom's workers open HTTP connections to addresses others chose: MCP
servers' URLs (workers/adapters/mcp_client.py) and webhook receivers (`guarded_post`).

The connection resolves the host name itself, once, checks every address it got against the
network guard (`registry.core.netguard.check_resolved_address`) and connects only to those very
addresses. A name that resolves to a public address for a check and to an internal one for the
connection (DNS rebinding) therefore gets nowhere: there is no second lookup.
"""

from __future__ import annotations

import functools
import math
import socket
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import httpcore2
import httpx2

from registry.core.netguard import UnsafeUrlError, connectable_addresses

# The text every refusal of the guard carries (mcp_client tells refusals from failures by it).
GUARD_REFUSAL_MARK = "TOOLROOM_ALLOWED_NETWORKS"


class GuardedBackend(httpcore2.AnyIOBackend):
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
        try:
            addresses = connectable_addresses(host, infos, allowed_networks=self.allowed_networks)
        except UnsafeUrlError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
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


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context (system CA bundle) for every HTTP client of this process.

    Building one loads the CA bundle: about 20 ms of CPU, four times what a whole health check of
    a loopback server costs otherwise. SSLContext is safe to share between connections.
    """
    return httpx2.create_ssl_context(trust_env=False)


def guarded_transport(
    *, allowed_networks: Sequence[str], limits: httpx2.Limits | None = None
) -> httpx2.AsyncHTTPTransport:
    """An HTTP transport whose every connection goes through `GuardedBackend`, with no proxy
    from the environment."""
    transport = httpx2.AsyncHTTPTransport(
        trust_env=False, verify=tls_context(), limits=limits or httpx2.Limits()
    )
    # httpx2 offers no public way to pass a network backend; the pool is created here, unused.
    transport._pool._network_backend = GuardedBackend(allowed_networks)
    return transport


class PostRefused(Exception):
    """The network guard refused every address the receiver's name resolved to."""


class PostFailed(Exception):
    """The receiver could not be reached, or did not answer in time (worth trying again)."""


async def guarded_post(
    url: str,
    *,
    body: bytes,
    headers: Mapping[str, str],
    timeout: float,
    allowed_networks: Sequence[str],
) -> int:
    """POST `body` once, through the guarded connection; the answer's status (its body is
    never read: it could be huge). Redirects are not followed. Raises PostRefused or
    PostFailed."""
    transport = guarded_transport(allowed_networks=allowed_networks)
    try:
        async with (
            httpx2.AsyncClient(
                transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
            ) as client,
            client.stream("POST", url, content=body, headers=dict(headers)) as answer,
        ):
            return answer.status_code
    except httpx2.ConnectError as exc:
        if GUARD_REFUSAL_MARK in str(exc):
            raise PostRefused(str(exc)) from exc
        raise PostFailed(f"ConnectError: {exc}") from exc
    except (httpx2.HTTPError, OSError) as exc:
        raise PostFailed(f"{type(exc).__name__}: {exc}") from exc
