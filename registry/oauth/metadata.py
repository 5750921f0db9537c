"""The gateway as an OAuth protected resource (RFC 9728): its metadata document and where it is.

Served by the gateway process (where clients look first, at the gateway's origin) and by the web
app (for a single origin where a proxy sends `/mcp` to the gateway and the rest to the web app).
Both build it from settings alone: the resource is the gateway's MCP endpoint, the authorization
server is Toolroom's public URL.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from registry.oauth.tokens import gateway_resource_url

PRM_PATH = "/.well-known/oauth-protected-resource"


def authorization_server_issuer() -> str:
    """The issuer of Toolroom's authorization server (RFC 8414): the public URL."""
    return str(settings.OAUTH2_PROVIDER.get("OIDC_ISS_ENDPOINT") or settings.TOOLROOM_PUBLIC_URL)


def protected_resource_metadata() -> dict[str, Any]:
    return {
        "resource": gateway_resource_url(),
        "authorization_servers": [authorization_server_issuer()],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["mcp"],
        "resource_name": "Toolroom gateway",
    }


def resource_metadata_url() -> str:
    """The path-suffixed metadata URL of the gateway's resource (RFC 9728 section 3.1), named in
    the 401's `WWW-Authenticate: Bearer resource_metadata="..."`."""
    parts = urlsplit(gateway_resource_url())
    return f"{parts.scheme}://{parts.netloc}{PRM_PATH}{parts.path.rstrip('/')}"
