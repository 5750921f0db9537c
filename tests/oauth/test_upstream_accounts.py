"""Each person's own account at a remote MCP server (issue 25): an SDK server that is its own OAuth
authorization server (tests/mcp_servers/oauth_upstream.py), linked from the portal with the
upstream's code flow and PKCE, called through a running gateway with each person's own token
(two people at once: each always sees themself), refreshed once under concurrency, refused with
a clear error for an agent token, an unlinked person, an unlinked or revoked account."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from django.db import connection
from django.test import Client as HttpClient
from django.utils import timezone
from mcp import MCPError
from mcp_types import URL_ELICITATION_REQUIRED

from registry.access import rules
from registry.gateway.checks import call_check
from registry.gateway.models import ToolCall
from registry.oauth.tokens import person_token_authenticate
from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.models import McpServer, Transport, UpstreamAuth
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from registry.teams.tokens import token_authenticate
from registry.upstream.models import AccountState, UpstreamAccount, UpstreamClient
from registry.upstream.services import SESSION_KEY
from registry.upstream.tokens import upstream_access_token
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway, calls_at_once, gateway_client, text_of
from tests.mcp_servers.oauth_upstream import RunningUpstream
from tests.oauth_helpers import person_access_token

SLUG = "tracker"
TOOL = f"{SLUG}__whoami"


@pytest.fixture
def upstream():
    running = RunningUpstream()
    yield running
    running.stop()


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


SHORT_SECONDS = 3


@pytest.fixture
def short_lived(world, upstream, monkeypatch):
    """Link Alice with an access token that lives SHORT_SECONDS (its refreshes get an hour), and
    margins of a second: a test waits for a real expiry."""
    monkeypatch.setattr("registry.upstream.tokens.REFRESH_MARGIN_SECONDS", 1.0)
    monkeypatch.setattr("workers.gateway.person_tokens.LOCAL_MARGIN_SECONDS", 0.5)

    def linked() -> None:
        upstream.authority.access_seconds = SHORT_SECONDS
        link(portal(world["alice"]), upstream, "alice@upstream")
        upstream.authority.access_seconds = 3600

    return linked


@pytest.fixture
def world(upstream) -> dict[str, Any]:
    """alpha (alice and bob) holds `tracker`, a per-person server; its tool `whoami`."""
    server = approved_server(SLUG, {"whoami": READ}, served=upstream.mcp)
    McpServer.objects.filter(pk=server.pk).update(
        transport=Transport.STREAMABLE_HTTP,
        url=upstream.url,
        command=[],
        upstream_auth=UpstreamAuth.PERSON_OAUTH,
    )
    # The gateway, the upstream and the test share one process on a busy machine: a deadline
    # that load alone never reaches (the default 5 s was, once, under three parallel suites).
    ServerGatewayPolicy.objects.update_or_create(
        server=server, defaults={"call_deadline_seconds": 60}
    )
    alpha = TeamFactory(slug="alpha")
    people = {}
    for name in ("alice", "bob"):
        people[name] = UserFactory(username=name)
        team_services.team_member_set(
            actor="test", team=alpha, user=people[name], level=MembershipLevel.OWNER
        )
    GrantFactory(team=alpha, server=server)
    return {"server": server, "team": alpha, **people}


def portal(person) -> HttpClient:
    http = HttpClient()
    http.force_login(person)
    return http


def link(http: HttpClient, upstream: RunningUpstream, subject: str) -> Any:
    """Link from the portal: Toolroom sends the browser to the upstream's authorization endpoint,
    the person signs in there as `subject`, and the upstream sends them back with the code."""
    started = http.post(f"/portal/accounts/{SLUG}/link/")
    assert started.status_code == 302, started.content
    authorize = started["Location"]
    assert authorize.startswith(f"{upstream.base}/authorize?")
    query = parse_qs(urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [upstream.url]
    sign_in = httpx2.get(authorize, follow_redirects=False)
    assert sign_in.status_code == 302, sign_in.text
    back = httpx2.get(f"{sign_in.headers['location']}&user={subject}", follow_redirects=False)
    assert back.status_code == 302, back.text
    callback = urlsplit(back.headers["location"])
    assert callback.path == "/portal/accounts/callback/"
    return http.get(f"{callback.path}?{callback.query}")


async def whoami(url: str, token: str, *, mode: str = "auto") -> tuple[bool, str]:
    async with gateway_client(url, token, mode=mode) as client:
        result = await client.call_tool(TOOL, {})
        return bool(result.is_error), text_of(result)


@pytest.mark.django_db
def test_linking_discovers_registers_and_stores_the_tokens_encrypted(world, upstream):
    http = portal(world["alice"])
    page = http.get("/portal/accounts/")
    assert b"Not linked" in page.content
    done = link(http, upstream, "alice@upstream")
    assert done.status_code == 302
    client = UpstreamClient.objects.get(server=world["server"])
    assert client.issuer == upstream.base
    assert client.token_endpoint == f"{upstream.base}/token"
    assert client.client_id in upstream.authority.clients  # registered itself (RFC 7591)
    account = UpstreamAccount.objects.get(person=world["alice"])
    assert account.state == AccountState.LINKED
    assert account.tokens["access_token"] in upstream.authority.access
    with connection.cursor() as cursor:
        cursor.execute("SELECT tokens FROM upstream_upstreamaccount WHERE id = %s", [account.pk])
        stored = cursor.fetchone()[0]
    assert account.tokens["access_token"] not in stored  # encrypted at rest
    assert account.tokens["refresh_token"] not in stored
    listed = http.get("/portal/accounts/").content.decode()
    assert "Linked" in listed
    assert account.tokens["access_token"] not in listed


@pytest.mark.django_db
def test_the_callback_takes_only_a_state_this_session_started(world, upstream):
    alice = portal(world["alice"])
    started = alice.post(f"/portal/accounts/{SLUG}/link/")
    sign_in = httpx2.get(started["Location"], follow_redirects=False)
    back = httpx2.get(f"{sign_in.headers['location']}&user=alice", follow_redirects=False)
    callback = urlsplit(back.headers["location"])
    # Bob's browser is sent to Alice's callback (a login CSRF): his session never started it.
    bob = portal(world["bob"])
    refused = bob.get(f"{callback.path}?{callback.query}", follow=True)
    assert b"not started from this portal session" in refused.content
    assert not UpstreamAccount.objects.exists()
    assert alice.session[SESSION_KEY]  # Alice's own link is still pending, and works
    alice.get(f"{callback.path}?{callback.query}")
    assert UpstreamAccount.objects.get().person == world["alice"]


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_an_agent_and_an_unlinked_person_are_refused_with_the_reason(world, upstream, committed):
    agent = AgentTokenFactory(team=world["team"])
    decision = call_check(identity=token_authenticate(agent.plain), name=TOOL, arguments={})
    assert decision.code == rules.UPSTREAM_ACCOUNT_NEEDS_PERSON
    assert "agent token has no person" in decision.message
    with committed():
        token = person_access_token(world["alice"], world["team"])
    identity = person_token_authenticate(token).identity
    decision = call_check(identity=identity, name=TOOL, arguments={})
    assert decision.code == rules.UPSTREAM_ACCOUNT_NOT_LINKED
    assert "link it at http://127.0.0.1:8000/portal/accounts/" in decision.message
    with committed():
        link(portal(world["alice"]), upstream, "alice@upstream")
    identity = person_token_authenticate(token).identity  # linking moved the team's version
    assert call_check(identity=identity, name=TOOL, arguments={}).allowed


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_two_people_call_at_once_and_each_always_sees_themself(world, upstream, gateway, mode):
    for name in ("alice", "bob"):
        link(portal(world[name]), upstream, f"{name}@upstream")
    tokens = {name: person_access_token(world[name], world["team"]) for name in ("alice", "bob")}
    callers = [(name, tokens[name], mode) for name in ("alice", "bob", "alice", "bob")]
    answers = anyio.run(calls_at_once, gateway.url, TOOL, callers, 10)
    assert len(answers) == 40
    for name, is_error, text in answers:
        assert (is_error, text) == (False, f"{name}@upstream")
    # One upstream session per person, never shared: each carries that person's token.
    sessions = {
        key for key in gateway.app.state.gateway.pool.sessions if key[0] == world["server"].pk
    }
    assert sessions == {
        (world["server"].pk, f"person:{world['alice'].pk}"),
        (world["server"].pk, f"person:{world['bob'].pk}"),
    }
    # Each call's record names the person's upstream account it used (never a token).
    anyio.run(gateway.recorder.flush)
    accounts = {a.person.username: a.pk for a in UpstreamAccount.objects.select_related("person")}
    used = {(r.person_name, r.upstream_account_id) for r in ToolCall.objects.filter(name=TOOL)}
    assert used == {("alice", accounts["alice"]), ("bob", accounts["bob"])}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_an_expired_or_refused_token_is_refreshed_once_then_a_revoked_account_says_relink(
    world, upstream, gateway, short_lived
):
    short_lived()
    token = person_access_token(world["alice"], world["team"])
    assert anyio.run(whoami, gateway.url, token) == (False, "alice@upstream")
    first = UpstreamAccount.objects.get().tokens["access_token"]
    # Expired (at the upstream too): refreshed before the call, transparently.
    time.sleep(SHORT_SECONDS + 0.2)
    assert anyio.run(whoami, gateway.url, token) == (False, "alice@upstream")
    assert upstream.authority.refreshes == 1
    # The gateway's process still holds the refreshed token; the provider drops it: the
    # upstream answers 401, Toolroom refreshes once and the call goes through.
    upstream.authority.revoke_person("alice@upstream", refresh_too=False)
    assert anyio.run(whoami, gateway.url, token) == (False, "alice@upstream")
    assert upstream.authority.refreshes == 2
    assert UpstreamAccount.objects.get().tokens["access_token"] != first
    # Revoked at the provider, refresh token too: a clear re-link error, the link marked broken.
    upstream.authority.revoke_person("alice@upstream", refresh_too=True)
    is_error, text = anyio.run(whoami, gateway.url, token)
    assert is_error
    assert "re-link your account at http://127.0.0.1:8000/portal/accounts/" in text
    account = UpstreamAccount.objects.get()
    assert account.state == AccountState.BROKEN
    assert account.tokens == {}
    assert "Broken: re-link" in portal(world["alice"]).get("/portal/accounts/").content.decode()
    # The next call is refused by the rule at once, without reaching the upstream.
    is_error, text = anyio.run(whoami, gateway.url, token)
    assert is_error
    assert "re-link your account" in text


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_unlinked_accounts_and_agent_tokens_are_refused_at_the_gateway(world, upstream, gateway):
    http = portal(world["alice"])
    link(http, upstream, "alice@upstream")
    token = person_access_token(world["alice"], world["team"])
    assert anyio.run(whoami, gateway.url, token) == (False, "alice@upstream")
    http.post(f"/portal/accounts/{SLUG}/unlink/")
    assert not UpstreamAccount.objects.exists()
    is_error, text = anyio.run(whoami, gateway.url, token)
    assert is_error
    assert "you have not linked yours: link it at" in text
    agent = AgentTokenFactory(team=world["team"])
    is_error, text = anyio.run(whoami, gateway.url, agent.plain)
    assert is_error
    assert "an agent token has no person" in text


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_twenty_concurrent_calls_on_two_gateways_after_expiry_refresh_once(
    world, upstream, short_lived
):
    """Two gateway processes' worth of token holders (each its own Gateway, pool and tokens,
    sharing only the database, as two processes do) and 20 calls right after expiry: the
    account row's lock lets one refresh; with the upstream rotating refresh tokens a second
    refresh would be refused and break the link."""
    short_lived()
    token = person_access_token(world["alice"], world["team"])
    gateways = [RunningGateway(), RunningGateway()]
    try:
        for running in gateways:  # both hold the token now
            assert anyio.run(whoami, running.url, token) == (False, "alice@upstream")
        time.sleep(SHORT_SECONDS + 0.2)
        answers: list[tuple[bool, str]] = []

        async def burst() -> None:
            async def one(url: str) -> None:
                answers.append(await whoami(url, token))

            async with anyio.create_task_group() as group:
                for index in range(20):
                    group.start_soon(one, gateways[index % 2].url)

        anyio.run(burst)
    finally:
        for running in gateways:
            running.stop()
    assert answers == [(False, "alice@upstream")] * 20
    assert upstream.authority.refreshes == 1
    assert upstream.authority.refused_refreshes == 0
    assert UpstreamAccount.objects.get().refreshes == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_refreshes_in_threads_refresh_once(world, upstream):
    """The lock itself: 20 threads, each with its own database connection, ask for the token
    right after it expired; one refreshes, the others wait and get its token."""
    link(portal(world["alice"]), upstream, "alice@upstream")
    UpstreamAccount.objects.update(expires_at=timezone.now() - timedelta(seconds=5))
    server_id, person_id = world["server"].pk, world["alice"].pk
    got: list[str] = []
    start = threading.Barrier(20)

    def ask() -> None:
        try:
            start.wait()
            got.append(upstream_access_token(server_id=server_id, person_id=person_id).access_token)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 20
    assert len(set(got)) == 1
    assert upstream.authority.refreshes == 1
    assert upstream.authority.refused_refreshes == 0


@pytest.mark.django_db
def test_an_upstream_on_a_network_toolroom_may_not_reach_is_refused(world, settings):
    settings.TOOLROOM_ALLOWED_NETWORKS = []
    answer = portal(world["alice"]).post(f"/portal/accounts/{SLUG}/link/", follow=True)
    page = answer.content.decode()
    assert "Toolroom cannot sign in at" in page
    assert "TOOLROOM_ALLOWED_NETWORKS" in page
    assert not UpstreamClient.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_a_client_that_declares_url_elicitation_is_sent_to_the_link_page(world, gateway):
    """2025-11-25's way (-32042, URL-mode elicitation) for a handshake client that declared it;
    a 2026-07-28 client, which has no -32042, reads the page in the error text."""
    token = person_access_token(world["alice"], world["team"])

    async def never_asked(context: Any, params: Any) -> Any:  # declares elicitation only
        raise AssertionError("the gateway asks nothing here")

    async def call(mode: str) -> Any:
        async with gateway_client(
            gateway.url, token, mode=mode, elicitation_callback=never_asked
        ) as client:
            try:
                return await client.call_tool(TOOL, {})
            except MCPError as exc:
                return exc

    refused = anyio.run(call, "legacy")
    assert isinstance(refused, MCPError)
    assert refused.error.code == URL_ELICITATION_REQUIRED
    (elicitation,) = refused.error.data["elicitations"]
    assert elicitation["mode"] == "url"
    assert elicitation["url"] == "http://127.0.0.1:8000/portal/accounts/"
    assert "you have not linked yours" in elicitation["message"]
    modern = anyio.run(call, "auto")
    assert modern.is_error
    assert "link it at http://127.0.0.1:8000/portal/accounts/" in text_of(modern)


@pytest.mark.django_db
def test_a_per_person_server_is_healthy_when_it_asks_for_each_persons_sign_in(world, upstream):
    """Toolroom has no token of its own there: the health check expects the 401 that asks for
    one, where a shared server's check would fail on it (and hide the server's tools)."""
    from registry.servers.jobs.launch import server_launch_plan_by_id
    from workers.health import check_plan

    plan = server_launch_plan_by_id(server_id=world["server"].pk)
    assert plan.upstream_auth == UpstreamAuth.PERSON_OAUTH
    assert anyio.run(check_plan, plan).ok
    as_shared = anyio.run(check_plan, dataclasses.replace(plan, upstream_auth="shared"))
    assert not as_shared.ok
    upstream.stop()
    down = anyio.run(check_plan, plan)
    assert not down.ok
    assert "Could not reach" in down.error


@pytest.mark.django_db
def test_the_explanation_names_the_upstream_account_rule(world):
    from registry.access.explain import RULE_UPSTREAM_ACCOUNT, access_explain
    from registry.servers.models import Tool

    team = world["team"]
    explanation = access_explain(
        team=team,
        role=team.roles.get(name="operations"),
        tool=Tool.objects.get(server=world["server"], name="whoami"),
    )
    (rule,) = [result for result in explanation.rules if result.rule == RULE_UPSTREAM_ACCOUNT]
    assert rule.facts == {"upstream_auth": UpstreamAuth.PERSON_OAUTH}
    assert "a person's call needs their linked account" in rule.reason
    assert "agent tokens are refused" in rule.reason
