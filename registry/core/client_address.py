"""The client's address: the socket's peer, or what the trusted proxies in front reported.

More: docs/security.md, "Module notes".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest


def _as_address(text: str) -> str | None:
    """The address in one `X-Forwarded-For` entry (a bare address, `[v6]:port` or `v4:port`)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def client_address(*, peer: str, forwarded_for: Iterable[str], trusted_hops: int) -> str:
    """The client's address, given the socket's peer, the `X-Forwarded-For` header values (in
    the order they came) and the number of trusted proxies in front of this process."""
    if trusted_hops <= 0:
        return peer
    entries = [entry for value in forwarded_for for entry in value.split(",")]
    if len(entries) < trusted_hops:
        return peer
    return _as_address(entries[-trusted_hops]) or peer


def request_client_address(request: HttpRequest) -> str:
    """The client's address of a Django request (django-axes' `AXES_CLIENT_IP_CALLABLE`, DRF's
    throttles)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    return client_address(
        peer=str(request.META.get("REMOTE_ADDR") or ""),
        forwarded_for=[forwarded] if forwarded else [],
        trusted_hops=int(settings.TOOLROOM_TRUSTED_PROXY_HOPS),
    )


def scope_client_address(scope: dict[str, Any] | Any) -> str:
    """The client's address of an ASGI request (the gateway)."""
    client = scope.get("client")
    headers = scope.get("headers") or []
    return client_address(
        peer=str(client[0]) if client else "",
        forwarded_for=[
            value.decode("latin-1") for name, value in headers if name == b"x-forwarded-for"
        ],
        trusted_hops=int(settings.TOOLROOM_TRUSTED_PROXY_HOPS),
    )
