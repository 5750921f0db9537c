"""Does an HTTP MCP server sign each person in with OAuth? Asked once, without a credential of
Toolroom's, through the network guard: the MCP authorization specification's answer is 401 with
`WWW-Authenticate: Bearer resource_metadata="<url>"` (RFC 9728). Import plans and the admin's
server form ask it, so such a server is set up as a per-person server (`upstream_auth`
person_oauth) from the start; discovery asks it after a failure (workers/discovery_account.py).
"""

from __future__ import annotations

from registry.core.mcp_sign_in import (
    HTTP_UNAUTHORIZED,
    resource_metadata_url,
    unauthenticated_initialize,
)
from registry.core.upstream_http import UpstreamHttpError, upstream_request

PROBE_TIMEOUT_SECONDS = 5.0


def oauth_resource_metadata(url: str, *, transport: str = "streamable_http") -> str:
    """The protected resource metadata URL the server's 401 names, or '' (it answered otherwise,
    named none, could not be reached, or is a legacy SSE server: the import goes on as the file
    says)."""
    if transport != "streamable_http" or not url:
        return ""  # a legacy SSE stream would be read until the timeout: not asked
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        answer = upstream_request(
            "POST",
            url,
            json_body=unauthenticated_initialize("toolroom-import"),
            headers=headers,
            timeout=PROBE_TIMEOUT_SECONDS,
        )
    except UpstreamHttpError:
        return ""
    if answer.status_code != HTTP_UNAUTHORIZED:
        return ""
    return resource_metadata_url(answer.headers)


def has_authorization_header(headers: dict[str, object] | None) -> bool:
    return any(str(name).lower() == "authorization" for name in (headers or {}))
