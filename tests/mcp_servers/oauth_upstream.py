"""A remote MCP server that is its own OAuth 2.1 authorization server, written with the official
SDK (`MCPServer` with an `OAuthAuthorizationServerProvider`): what GitHub's, Atlassian's or
Linear's MCP endpoints look like to Toolroom.

It answers an unauthenticated request with 401 and its RFC 9728 metadata, publishes RFC 8414
metadata, registers clients (RFC 7591), signs people in on its own `/login` page (a test names
who signs in in the URL; a browser gets a page where the person types their name and allows or
denies), issues codes with PKCE, rotates refresh
tokens (an old one is refused), and its `whoami` tool answers the token's subject. It runs in a
thread of the test process (uvicorn), so a test can count refreshes and revoke tokens.
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from tests.mcp_fixtures import free_port


class UpstreamAuthority:
    """The in-memory OAuth provider: clients, pending sign-ins, codes and tokens."""

    def __init__(self, base: str, *, access_seconds: int = 3600) -> None:
        self.base = base
        self.access_seconds = access_seconds
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, tuple[str, AuthorizationParams]] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.refreshes = 0  # successful refresh exchanges
        self.refused_refreshes = 0
        self.lock = threading.Lock()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        request = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.pending[request] = (client.client_id, params)
        return f"{self.base}/login?request={request}"

    def sign_in(self, request: str, user: str) -> str:
        """The login page's work: a code for `user`, and where the browser goes with it."""
        client_id, params = self.pending.pop(request)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 60,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=user,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str
    ) -> OAuthToken:
        access = "up_at_" + secrets.token_urlsafe(24)
        refresh = "up_rt_" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_seconds,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.access_seconds,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        assert client.client_id is not None
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject or "",
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        if found is None:
            with self.lock:
                self.refused_refreshes += 1
        return found

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        with self.lock:
            if self.refresh.pop(refresh_token.token, None) is None:  # rotated: used once only
                self.refused_refreshes += 1
                raise TokenError("invalid_grant", "refresh token already used")
            self.refreshes += 1
        assert client.client_id is not None
        return self._issue(
            client.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            refresh_token.subject or "",
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def revoke_person(self, subject: str, *, refresh_too: bool) -> None:
        """What the provider's own "sign out everywhere" does (the test's revocation)."""
        for token in [t for t, a in self.access.items() if a.subject == subject]:
            del self.access[token]
        if refresh_too:
            for token in [t for t, r in self.refresh.items() if r.subject == subject]:
                del self.refresh[token]


def build_upstream(base: str, authority: UpstreamAuthority) -> MCPServer:
    server = MCPServer(
        "upstream-with-oauth",
        auth_server_provider=authority,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
            validate_token_resource=True,  # RFC 8707: tokens for this very server only
        ),
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def whoami() -> str:
        """Who the upstream thinks is calling (the access token's subject)."""
        token = get_access_token()
        return token.subject if token is not None and token.subject else "(nobody)"

    @server.custom_route("/login", methods=["GET", "POST"])
    async def login(request: Request) -> Response:
        """GET with `user`: signed in at once (the tests' shortcut); GET without: the sign-in
        and consent page a browser shows; POST: that page's answer (Allow or Deny)."""
        fields: dict[str, Any] = dict(request.query_params)
        if request.method == "POST":
            fields = dict(await request.form())
        request_id = str(fields.get("request", ""))
        user = str(fields.get("user", ""))
        if request_id not in authority.pending:
            return PlainTextResponse("unknown sign-in", status_code=400)
        if request.method == "GET" and not user:
            return HTMLResponse(_consent_page(request_id, authority.pending[request_id][1]))
        if fields.get("decision") == "deny":
            _, params = authority.pending.pop(request_id)
            denied = construct_redirect_uri(
                str(params.redirect_uri), error="access_denied", state=params.state
            )
            return RedirectResponse(denied, status_code=302)
        if not user:
            return PlainTextResponse("no user", status_code=400)
        return RedirectResponse(authority.sign_in(request_id, user), status_code=302)

    return server


def _consent_page(request_id: str, params: AuthorizationParams) -> str:
    scopes = " ".join(params.scopes or []) or "(none)"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to the tracker</title>
<link rel="icon" href="data:,"></head>
<body><h1>Sign in to the tracker</h1>
<form method="post" action="/login">
<input type="hidden" name="request" value="{html.escape(request_id)}">
<p><label for="user">Your name</label> <input id="user" name="user" autocomplete="off"></p>
<p>Toolroom asks to act as you here (scopes: {html.escape(scopes)}).</p>
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></body></html>"""


class RunningUpstream:
    """The upstream in a thread of this process, on a port of its own."""

    def __init__(self, *, access_seconds: int = 3600) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self.authority = UpstreamAuthority(self.base, access_seconds=access_seconds)
        self.mcp = build_upstream(self.base, self.authority)  # tests approve what it lists
        app: Any = self.mcp.streamable_http_app()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="upstream", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the upstream did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
