"""Two people link their own accounts at a per-person server in a real browser (issue 25): the
portal's Connected accounts page, the upstream's own sign-in and consent page (the SDK server that
is its own authorization server, tests/mcp_servers/oauth_upstream.py), back to Toolroom linked;
then both call through the running gateway at once, in both protocol modes, and every answer
names the caller at the upstream. An admin links the account
that discovers the server's tools from the server's admin page the same way. Any console error
or 4xx/5xx response fails the test (tests/browser/conftest.py)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from io import StringIO
from typing import Any

import anyio
import pytest
from django.core.management import call_command
from playwright.sync_api import Page

from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.models import DiscoveryRun, McpServer, Transport, UpstreamAuth
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from registry.upstream.models import AccountState, UpstreamAccount
from tests.browser.conftest import PASSWORD, sign_in
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway, calls_at_once
from tests.mcp_servers.oauth_upstream import RunningUpstream
from tests.oauth_helpers import person_access_token

SLUG = "tracker"
STEP_SECONDS = 60


@pytest.fixture
def upstream() -> Iterator[RunningUpstream]:
    running = RunningUpstream()
    yield running
    running.stop()


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def world(live_server, upstream, settings, transactional_db) -> dict[str, Any]:
    """charlie and dana own alpha, which holds `tracker`: a per-person server at the upstream.
    Toolroom's public URL is the live server's (its callback is the upstream's redirect URI)."""
    settings.TOOLROOM_PUBLIC_URL = live_server.url
    server = approved_server(SLUG, {"whoami": READ}, served=upstream.mcp)
    McpServer.objects.filter(pk=server.pk).update(
        transport=Transport.STREAMABLE_HTTP,
        url=upstream.url,
        command=[],
        upstream_auth=UpstreamAuth.PERSON_OAUTH,
    )
    ServerGatewayPolicy.objects.update_or_create(
        server=server, defaults={"call_deadline_seconds": 60}
    )
    alpha = TeamFactory(slug="alpha", name="Alpha")
    people = {}
    for name in ("charlie", "dana"):
        people[name] = UserFactory(username=name)
        team_services.team_member_set(
            actor="test", team=alpha, user=people[name], level=MembershipLevel.OWNER
        )
    GrantFactory(team=alpha, server=server)
    return {"server": server, "team": alpha, **people}


def portal_sign_in(page: Page, username: str) -> None:
    page.goto("/portal/sign-in/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(re.compile(r"/portal/$"))


def consent_upstream(page: Page, upstream: RunningUpstream, name: str) -> None:
    """The upstream's own sign-in and consent page: type the name, Allow."""
    page.wait_for_url(re.compile(rf"^{re.escape(upstream.base)}/login\?"))
    assert "Toolroom asks to act as you here" in page.content()
    page.get_by_label("Your name").fill(name)
    page.get_by_role("button", name="Allow").click()


def whoami_all(gateway_url: str, tokens: dict[str, str], calls: int) -> list[tuple[str, bool, str]]:
    """`calls` calls per person and protocol mode, all at once through the gateway, in a thread
    of its own (Playwright's loop is this one's): (whose token, is_error, answer) for each."""
    callers = [(name, token, mode) for name, token in tokens.items() for mode in ("auto", "legacy")]
    answers: list[tuple[str, bool, str]] = []

    def run() -> None:
        answers.extend(anyio.run(calls_at_once, gateway_url, f"{SLUG}__whoami", callers, calls))

    calling = threading.Thread(target=run)
    calling.start()
    calling.join(timeout=STEP_SECONDS)
    assert len(answers) == len(tokens) * 2 * calls, "the calls did not finish"
    return answers


def link_in_browser(page: Page, upstream: RunningUpstream, person: Any) -> None:
    """`person` signs in to the portal and links their account at the upstream's own page."""
    page.context.clear_cookies()
    portal_sign_in(page, person.username)
    page.goto("/portal/accounts/")
    row = page.locator("tr.upstream-account", has_text="Tracker")
    assert row.locator(".state").inner_text() == "Not linked"
    row.get_by_role("button", name="Link").click()
    consent_upstream(page, upstream, f"{person.username}@tracker")
    page.wait_for_url(re.compile(r"/portal/accounts/$"))
    assert "Your account at Tracker is linked." in page.content()
    state = page.locator("tr.upstream-account", has_text="Tracker").locator(".state")
    assert state.inner_text().startswith("Linked")
    account = UpstreamAccount.objects.get(person=person)
    assert account.state == AccountState.LINKED
    assert account.tokens["access_token"] not in page.content()  # never shown


@pytest.mark.processes
@pytest.mark.usefixtures("redis_cache")
def test_two_people_link_their_accounts_in_the_browser_and_calls_act_as_each(
    page: Page, world, upstream, gateway
):
    for name in ("charlie", "dana"):
        link_in_browser(page, upstream, world[name])

    # Each person's MCP client signed in to Toolroom; both call at once, in both protocol modes:
    # every answer names the caller at the upstream, never the other person.
    tokens = {name: person_access_token(world[name], world["team"]) for name in ("charlie", "dana")}
    answers = whoami_all(gateway.url, tokens, calls=5)
    for name, is_error, text in answers:
        assert (is_error, text) == (False, f"{name}@tracker")


@pytest.mark.processes
def test_an_admin_links_the_discovery_account_from_the_server_page(page: Page, world, upstream):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    sign_in(page, "root")
    server = world["server"]
    page.goto(f"/admin/servers/mcpserver/{server.pk}/change/")
    assert "This server needs an admin's account to discover tools" in page.content()
    page.get_by_role("link", name="Link my account for discovery").click()
    page.get_by_role("button", name="Link my account for discovery").click()
    consent_upstream(page, upstream, "root@tracker")
    page.wait_for_url(re.compile(rf"/admin/servers/mcpserver/{server.pk}/change/$"))
    assert "discovers its tools; a discovery was requested" in page.content()
    assert "Tools are discovered and health checked with the account of" in page.content()
    account = UpstreamAccount.objects.get(server=server, for_discovery=True)
    assert account.person.username == "root"
    # The workers' discovery (here in this process) lists the tools with root's account.
    discovering = threading.Thread(
        target=call_command,
        args=("mcp", "discover", SLUG, "--inline"),
        kwargs={"stdout": StringIO()},
    )
    discovering.start()
    discovering.join(timeout=STEP_SECONDS)
    run = DiscoveryRun.objects.filter(server=server).latest("pk")
    assert run.status == "succeeded", run.error
