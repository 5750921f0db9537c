"""HTTP to an upstream (an MCP server, its authorization server), through Toolroom's network guard.

Every URL the upstream names (its resource metadata, its authorization server's metadata and
endpoints) is checked with `registry.core.netguard.check_server_url`, and every connection resolves
the host once, checks each address against `TOOLROOM_ALLOWED_NETWORKS` and connects only to those
addresses (no second lookup that DNS rebinding could turn). No redirect is followed; answers are
read up to MAX_ANSWER_BYTES within TIMEOUT_SECONDS.
"""

from __future__ import annotations

import functools
import json
import socket
from typing import Any

import httpcore2
import httpx2
from django.conf import settings

from registry.core.netguard import UnsafeUrlError, check_server_url, connectable_addresses

TIMEOUT_SECONDS = 10.0
MAX_ANSWER_BYTES = 256 * 1024


class UpstreamHttpError(Exception):
    """The upstream could not be asked, or answered what Toolroom cannot use; says which."""


class UpstreamRefused(UpstreamHttpError):
    """The upstream answered, and refused (an OAuth error such as invalid_grant)."""


class _GuardedSyncBackend(httpcore2.SyncBackend):
    def __init__(self, allowed_networks: list[str]) -> None:
        self.allowed_networks = allowed_networks

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.NetworkStream:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"{host}: {exc}") from exc
        try:
            addresses = connectable_addresses(host, infos, allowed_networks=self.allowed_networks)
        except UnsafeUrlError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        last: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore2.ConnectError(f"{host} has no address")


@functools.cache
def _tls() -> Any:
    return httpx2.create_ssl_context(trust_env=False)


def _client(timeout: float) -> httpx2.Client:
    allowed = list(settings.TOOLROOM_ALLOWED_NETWORKS)
    transport = httpx2.HTTPTransport(trust_env=False, verify=_tls())
    transport._pool._network_backend = _GuardedSyncBackend(allowed)
    return httpx2.Client(
        transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
    )


def guarded_url(url: str) -> str:
    """`url` if the network guard lets Toolroom reach it, else UpstreamHttpError saying why."""
    try:
        return check_server_url(url, allowed_networks=settings.TOOLROOM_ALLOWED_NETWORKS)
    except UnsafeUrlError as exc:
        raise UpstreamHttpError(f"{url[:200]} is refused: {exc}") from exc


def upstream_request(
    method: str,
    url: str,
    *,
    data: dict[str, str] | None = None,
    json_body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = TIMEOUT_SECONDS,
) -> httpx2.Response:
    """One request, guarded, no redirect followed; its answer read (at most MAX_ANSWER_BYTES)."""
    guarded_url(url)
    try:
        with (
            _client(timeout) as client,
            client.stream(method, url, data=data, json=json_body, headers=headers) as answer,
        ):
            body = b""
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise UpstreamHttpError(f"{url[:200]} answered more than {MAX_ANSWER_BYTES} B")
            return httpx2.Response(answer.status_code, headers=answer.headers, content=body)
    except httpx2.HTTPError as exc:
        raise UpstreamHttpError(f"{url[:200]} could not be reached: {exc}") from exc


def answer_json(answer: httpx2.Response, what: str) -> dict[str, Any]:
    try:
        document = json.loads(answer.content)
    except ValueError as exc:
        raise UpstreamHttpError(f"{what} is not JSON (HTTP {answer.status_code})") from exc
    if not isinstance(document, dict):
        raise UpstreamHttpError(f"{what} is not a JSON object")
    return document
