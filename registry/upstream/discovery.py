"""How Toolroom finds a per-person server's authorization server and becomes its client.

The server's unauthenticated answer is a 401 whose `WWW-Authenticate` names its protected resource
metadata (RFC 9728; else the path-suffixed well-known address is tried); that document names the
authorization server, whose RFC 8414 metadata gives the endpoints. Toolroom then registers itself
(RFC 7591) unless the admin entered a client id. Every URL passes the network guard
(registry/core/upstream_http.py).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from registry.core.mcp_sign_in import unauthenticated_initialize
from registry.servers.models import McpServer, UpstreamAuth
from registry.upstream.http import UpstreamHttpError, answer_json, guarded_url, upstream_request
from registry.upstream.models import Registration, UpstreamClient

_RESOURCE_METADATA = re.compile(r'resource_metadata="([^"]+)"')


def callback_url() -> str:
    """Toolroom's one redirect URI at every upstream (the portal's callback)."""
    return settings.TOOLROOM_PUBLIC_URL.rstrip("/") + reverse("portal:upstream-callback")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _well_known(url: str, name: str) -> list[str]:
    """RFC 8414 / RFC 9728 addresses: the path-suffixed form first, then the root."""
    path = urlsplit(url).path.rstrip("/")
    found = [f"{_origin(url)}/.well-known/{name}{path}"] if path else []
    return [*found, f"{_origin(url)}/.well-known/{name}"]


def needs_oauth(server_url: str) -> str:
    """The protected resource metadata URL if the server answers 401 and asks for OAuth, else ''."""
    answer = upstream_request(
        "POST",
        server_url,
        json_body=unauthenticated_initialize("toolroom-discovery"),
        headers={"Accept": "application/json, text/event-stream"},
    )
    if answer.status_code != 401:
        return ""
    found = _RESOURCE_METADATA.search(answer.headers.get("www-authenticate", ""))
    return found.group(1) if found else _well_known(server_url, "oauth-protected-resource")[0]


def _first_document(urls: list[str], what: str) -> dict[str, Any]:
    problems = []
    for url in urls:
        answer = upstream_request("GET", url, headers={"Accept": "application/json"})
        if answer.status_code == 200:
            return answer_json(answer, what)
        problems.append(f"{url} answered HTTP {answer.status_code}")
    raise UpstreamHttpError(f"no {what} found ({'; '.join(problems)})")


def _register(client: UpstreamClient, metadata: dict[str, Any]) -> None:
    endpoint = str(metadata.get("registration_endpoint") or "")
    if not endpoint:
        raise UpstreamHttpError(
            "the authorization server offers no dynamic registration: enter a client id (and "
            "secret) it issued for Toolroom on the server's upstream client"
        )
    document = {
        "client_name": "Toolroom",
        "redirect_uris": [client.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_post",
    }
    if client.scopes:
        document["scope"] = client.scopes
    answer = upstream_request("POST", guarded_url(endpoint), json_body=document)
    registered = answer_json(answer, "the registration answer")
    if answer.status_code not in (200, 201) or not registered.get("client_id"):
        raise UpstreamHttpError(
            f"registration refused (HTTP {answer.status_code}): "
            f"{str(registered.get('error_description') or registered.get('error') or '')[:200]}"
        )
    client.registration_endpoint = endpoint
    client.client_id = str(registered["client_id"])
    secret = registered.get("client_secret")
    client.client_secret = {"client_secret": str(secret)} if secret else {}


def upstream_discover(*, server: McpServer) -> UpstreamClient:
    """Discover the server's authorization server and register with it (or keep the admin's
    client); raises UpstreamHttpError saying what failed."""
    if server.upstream_auth != UpstreamAuth.PERSON_OAUTH:
        raise UpstreamHttpError(f"{server.slug} does not act for each person")
    prm_url = needs_oauth(server.url)
    if not prm_url:
        raise UpstreamHttpError(f"{server.slug} did not ask for OAuth (no 401 without a token)")
    prm = _first_document(
        [guarded_url(prm_url), *_well_known(server.url, "oauth-protected-resource")[1:]],
        "protected resource metadata",
    )
    servers = prm.get("authorization_servers") or []
    if not servers or not isinstance(servers[0], str):
        raise UpstreamHttpError("the protected resource metadata names no authorization server")
    issuer = guarded_url(servers[0])
    metadata = _first_document(
        _well_known(issuer, "oauth-authorization-server")
        + _well_known(issuer, "openid-configuration"),
        "authorization server metadata",
    )
    methods = metadata.get("code_challenge_methods_supported")
    if methods is not None and "S256" not in methods:
        raise UpstreamHttpError("the authorization server does not support PKCE with S256")
    with transaction.atomic():
        client, _ = UpstreamClient.objects.select_for_update().get_or_create(server=server)
        client.resource = str(prm.get("resource") or server.url)
        client.issuer = str(metadata.get("issuer") or issuer)
        for endpoint in ("authorization_endpoint", "token_endpoint"):
            if not metadata.get(endpoint):
                raise UpstreamHttpError(f"the authorization server metadata has no {endpoint}")
        client.authorization_endpoint = guarded_url(str(metadata["authorization_endpoint"]))
        client.token_endpoint = guarded_url(str(metadata["token_endpoint"]))
        client.revocation_endpoint = str(metadata.get("revocation_endpoint") or "")
        if not client.scopes and prm.get("scopes_supported"):
            client.scopes = " ".join(str(scope) for scope in prm["scopes_supported"])
        if client.registration == Registration.DYNAMIC and (
            not client.client_id or client.redirect_uri != callback_url()
        ):
            client.redirect_uri = callback_url()
            _register(client, metadata)
        client.redirect_uri = client.redirect_uri or callback_url()
        client.discovered_at = timezone.now()
        client.save()
    return client
