"""A person adds Toolroom to their MCP client with the gateway URL alone: the official SDK client's
`OAuthClientProvider` against the running gateway (both protocol generations), a real browser
(Debian's Chromium through Playwright) for the portal's sign-in and consent, and nothing mocked on
the way: the 401, discovery (RFC 9728, RFC 8414), registration (once with a client metadata
document served over HTTPS by a local TLS server whose test CA Toolroom trusts, once with Dynamic
Client Registration), the code with PKCE, tools/list and a call, the access token expiring and
being refreshed, and the app revoked in the portal after which the next call is refused.

The SDK client runs in a thread of its own (its event loop), the browser in the test's thread;
they hand each other the authorization URL and the redirect's code through queues.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from playwright.sync_api import Page

from registry.gateway.models import ToolCall
from registry.oauth.models import AccessToken
from registry.oauth.models import Client as RegisteredClient
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.browser.conftest import PASSWORD, PageProblems
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server, text_of
from tests.mcp_fixtures import free_port, http_scenario_server  # noqa: F401 (a fixture)
from tests.oauth_helpers import DocumentServer

STEP_SECONDS = 60


class MemoryStorage(TokenStorage):
    """Where the client keeps its tokens and registration (a real client keeps them on disk)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Callback:
    """The client's redirect URI: a local HTTP server that hands the code over."""

    def __init__(self) -> None:
        self.codes: queue.Queue[dict[str, str]] = queue.Queue()
        codes = self.codes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                codes.put(query)
                body = b"<!doctype html><title>Signed in</title><p>You can close this tab.</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}/callback"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def gateway_running() -> Iterator[RunningGateway]:
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def oauth_world(live_server, gateway_running, http_scenario_server, settings, tmp_path):  # noqa: F811
    """charlie owns alpha, which holds the HTTP server `echo`; Toolroom's public URL is the live
    server (the authorization server) and its gateway the running gateway (the resource)."""
    settings.TOOLROOM_PUBLIC_URL = live_server.url
    settings.TOOLROOM_GATEWAY_URL = gateway_running.url
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": live_server.url}
    documents = DocumentServer(tmp_path)
    settings.TOOLROOM_OAUTH_CIMD_CA_BUNDLE = str(documents.ca_file)
    charlie = UserFactory(username="charlie")
    alpha = TeamFactory(slug="alpha", name="Alpha")
    services.team_member_set(actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER)
    # Discovery runs its own event loop: in a thread, away from Playwright's loop in this one.
    found: list[Any] = []
    discovering = threading.Thread(
        target=lambda: found.append(discovered_http_server("echo", http_scenario_server.url))
    )
    discovering.start()
    discovering.join(timeout=STEP_SECONDS)
    GrantFactory(team=alpha, server=found[0])
    callback = Callback()
    yield {"gateway": gateway_running, "documents": documents, "callback": callback}
    callback.close()
    documents.close()


class ClientRun:
    """The SDK client's side, run in its own thread: sign in, list, call, refresh, and a last
    call after the app was revoked."""

    def __init__(self, world: dict[str, Any], *, mode: str, metadata_url: str | None) -> None:
        self.world = world
        self.mode = mode
        self.metadata_url = metadata_url
        self.storage = MemoryStorage()
        self.urls: queue.Queue[str] = queue.Queue()
        self.steps: queue.Queue[str] = queue.Queue()  # the test's "go on" after each pause
        self.paused: queue.Queue[str] = queue.Queue()
        self.results: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.signing_in_again = False
        self.thread = threading.Thread(target=self._run, name="mcp-client", daemon=True)

    def start(self) -> None:
        self.thread.start()

    async def _redirect(self, url: str) -> None:
        self.urls.put(url)

    async def _callback(self) -> AuthorizationCodeResult:
        if self.signing_in_again:
            raise RuntimeError("the person does not sign in again after revoking the app")
        query = await anyio.to_thread.run_sync(
            lambda: self.world["callback"].codes.get(timeout=STEP_SECONDS)
        )
        # The RFC 9207 `iss` goes back too: the client checks it against the issuer it expects.
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    async def _pause(self, name: str) -> None:
        self.paused.put(name)
        await anyio.to_thread.run_sync(lambda: self.steps.get(timeout=STEP_SECONDS))

    def _run(self) -> None:
        try:
            anyio.run(self._flow)
        except BaseException as exc:  # handed to the test's thread
            if self.signing_in_again:  # the refusal after the revocation, out of the client
                self.results["after_revoke"] = exc
                return
            self.error = exc
            self.paused.put("failed")

    async def _flow(self) -> None:
        callback = self.world["callback"]
        provider = OAuthClientProvider(
            server_url=self.world["gateway"].url,
            client_metadata=OAuthClientMetadata(
                client_name="E2E editor",
                redirect_uris=[callback.url],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage=self.storage,
            redirect_handler=self._redirect,
            callback_handler=self._callback,
            client_metadata_url=self.metadata_url,
        )
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60.0)) as http:
            transport = streamable_http_client(self.world["gateway"].url, http_client=http)
            async with Client(transport, mode=self.mode) as client:
                listed = await client.list_tools()
                self.results["tools"] = [tool.name for tool in listed.tools]
                self.results["first"] = text_of(
                    await client.call_tool("echo__echo", {"text": "hi"})
                )
                self.results["first_token"] = self.storage.tokens.access_token
                await self._pause("expire")  # the test moves the clock past the token's expiry
                self.results["second"] = text_of(
                    await client.call_tool("echo__echo", {"text": "again"})
                )
                self.results["second_token"] = self.storage.tokens.access_token
                await self._pause("revoke")  # the test revokes the app in the portal
                self.signing_in_again = True
                # Refused with 401: the client tries its refresh token (revoked too), then sends
                # the person to sign in again, which this person does not do.
                await client.call_tool("echo__echo", {"text": "after"})
                self.results["after_revoke"] = None

    def wait_paused(self) -> str:
        step = self.paused.get(timeout=STEP_SECONDS * 3)
        if self.error is not None:
            raise self.error
        return step


def sign_in_and_consent(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_url(re.compile(r"/portal/sign-in/"))
    page.get_by_label("User name").fill("charlie")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(re.compile(r"/oauth/authorize/"))
    assert page.locator(".client-name").inner_text() == "E2E editor"
    assert page.locator(".redirect-host").inner_text().startswith("127.0.0.1:")
    page.locator("label", has_text="operations").locator("input[name=choice]").check()
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url(re.compile(r"127\.0\.0\.1:\d+/callback\?"))


@pytest.mark.processes
@pytest.mark.parametrize(
    ("mode", "registration"), [("auto", "metadata_document"), ("legacy", "dynamic")]
)
def test_a_person_signs_in_from_their_mcp_client_and_every_call_acts_for_them(  # noqa: PLR0917
    page: Page, page_problems: PageProblems, oauth_world, clock, mode, registration
):
    documents = oauth_world["documents"]
    metadata_url = None
    if registration == "metadata_document":
        metadata_url = documents.url("/e2e-editor.json")
        documents.put(
            "/e2e-editor.json",
            {
                "client_id": metadata_url,
                "client_name": "E2E editor",
                "redirect_uris": [oauth_world["callback"].url],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            },
        )
    run = ClientRun(oauth_world, mode=mode, metadata_url=metadata_url)
    run.start()

    sign_in_and_consent(page, run.urls.get(timeout=STEP_SECONDS * 3))
    assert run.wait_paused() == "expire"
    assert run.results["tools"] == ["echo__add", "echo__echo", "echo__sleep"]
    assert run.results["first"] == "hi"
    client = RegisteredClient.objects.get()
    assert client.registration_source == ("cimd" if metadata_url else "dcr")

    clock.advance(700)  # past the access token's 10 minutes: the client refreshes it by itself
    run.steps.put("go on")
    assert run.wait_paused() == "revoke"
    assert run.results["second"] == "again"
    assert run.results["second_token"] != run.results["first_token"]
    assert AccessToken.objects.filter(authorization__isnull=False).count() == 2

    page.goto("/portal/apps/")
    assert "E2E editor" in page.locator(".app-name").inner_text()
    page.get_by_role("button", name="Revoke").click()
    page.wait_for_url(re.compile(r"/portal/apps/$"))
    run.steps.put("go on")
    run.thread.join(timeout=STEP_SECONDS * 3)
    assert not run.thread.is_alive()
    if run.error is not None:
        raise run.error
    assert run.results["after_revoke"] is not None  # refused: the app must sign in again
    assert "/oauth/authorize/" in run.urls.get(timeout=1)  # it asked the person to
    answer = httpx2.post(
        oauth_world["gateway"].url,
        headers={
            "Authorization": f"Bearer {run.results['second_token']}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert answer.status_code == 401
    assert "was revoked" in answer.headers["www-authenticate"]

    # Playwright's loop is this thread's: the audit buffer is written from a thread of its own.
    flushing = threading.Thread(target=anyio.run, args=(oauth_world["gateway"].recorder.flush,))
    flushing.start()
    flushing.join(timeout=STEP_SECONDS)
    records = list(ToolCall.objects.order_by("started_at"))
    assert [(r.person_name, r.client_name, r.role_name) for r in records] == [
        ("charlie", "E2E editor", "operations"),
        ("charlie", "E2E editor", "operations"),
    ]
