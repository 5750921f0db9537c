"""Each person's own secret at a remote MCP server (issue 25, the person_secret mode): a personal
token or API key each person enters once in the portal (stored encrypted, never shown again), sent
by the gateway in the header the admin named on that person's calls only, against an SDK server
that answers whose key it got (tests/mcp_servers/key_upstream.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from django.db import connection
from django.test import Client as HttpClient

from registry.audit.models import AuditEvent
from registry.gateway.models import CallOutcome, ToolCall
from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.models import McpServer, Transport, UpstreamAuth
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from registry.upstream.models import AccountState, UpstreamAccount
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway, calls_at_once, gateway_client, text_of
from tests.mcp_servers.key_upstream import KeyedUpstream
from tests.oauth_helpers import person_access_token

SLUG = "keyed"
TOOL = f"{SLUG}__whoami"
KEYS = {"key-of-alice-1": "alice", "key-of-alice-2": "alice (second key)", "key-of-bob": "bob"}


@pytest.fixture
def upstream():
    running = KeyedUpstream(dict(KEYS), header="X-Api-Key", prefix="Key ")
    yield running
    running.stop()


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def world(upstream) -> dict[str, Any]:
    """alpha (alice, bob and carol) holds `keyed`, whose calls carry each person's own key in
    `X-Api-Key: Key <key>`."""
    server = approved_server(SLUG, {"whoami": READ}, served=upstream.mcp)
    McpServer.objects.filter(pk=server.pk).update(
        transport=Transport.STREAMABLE_HTTP,
        url=upstream.url,
        command=[],
        upstream_auth=UpstreamAuth.PERSON_SECRET,
        person_secret_header="X-Api-Key",
        person_secret_prefix="Key ",
    )
    ServerGatewayPolicy.objects.update_or_create(
        server=server, defaults={"call_deadline_seconds": 60}
    )
    alpha = TeamFactory(slug="alpha")
    people = {}
    for name in ("alice", "bob", "carol"):
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


def enter(person, secret: str) -> Any:
    return portal(person).post(f"/portal/accounts/{SLUG}/secret/", {"secret": secret}, follow=True)


async def whoami(url: str, token: str, *, mode: str = "auto") -> tuple[bool, str]:
    async with gateway_client(url, token, mode=mode) as client:
        result = await client.call_tool(TOOL, {})
        return bool(result.is_error), text_of(result)


@pytest.mark.django_db
def test_a_person_enters_their_secret_once_encrypted_and_never_shown_again(world):
    http = portal(world["alice"])
    page = http.get("/portal/accounts/").content.decode()
    assert "Not entered" in page
    assert "sent as X-Api-Key" in page
    done = enter(world["alice"], "key-of-alice-1").content.decode()
    assert "is kept (it is never shown)" in done
    account = UpstreamAccount.objects.get(person=world["alice"])
    assert account.state == AccountState.LINKED
    assert account.tokens == {"secret": "key-of-alice-1"}
    with connection.cursor() as cursor:
        cursor.execute("SELECT tokens FROM upstream_upstreamaccount WHERE id = %s", [account.pk])
        assert "key-of-alice-1" not in cursor.fetchone()[0]  # encrypted at rest
    listed = http.get("/portal/accounts/").content.decode()
    assert "Entered" in listed
    assert "Replace" in listed
    assert "key-of-alice-1" not in listed
    audit = AuditEvent.objects.filter(action="upstream.account_linked").get()
    assert "key-of-alice-1" not in f"{audit.summary} {audit.details}"
    # Replaced, never shown; a value that cannot travel in a header is refused and changes nothing.
    enter(world["alice"], "key-of-alice-2")
    assert UpstreamAccount.objects.get(pk=account.pk).tokens == {"secret": "key-of-alice-2"}
    refused = enter(world["alice"], "key\r\nX-Injected: 1").content.decode()
    assert "cannot be sent in an HTTP header" in refused
    assert UpstreamAccount.objects.get(pk=account.pk).tokens == {"secret": "key-of-alice-2"}
    # Removed.
    http.post(f"/portal/accounts/{SLUG}/unlink/")
    assert not UpstreamAccount.objects.exists()


@pytest.mark.django_db
def test_a_person_outside_the_teams_that_hold_it_cannot_enter_one(world):
    outsider = UserFactory(username="mallory")
    answer = enter(outsider, "key-of-mallory").content.decode()
    assert "None of your teams uses" in answer
    assert not UpstreamAccount.objects.exists()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_each_persons_key_reaches_the_upstream_in_the_named_header_for_them_only(
    world, upstream, gateway, mode
):
    enter(world["alice"], "key-of-alice-1")
    enter(world["bob"], "key-of-bob")
    tokens = {name: person_access_token(world[name], world["team"]) for name in ("alice", "bob")}
    callers = [(name, tokens[name], mode) for name in ("alice", "bob", "alice", "bob")]
    answers = anyio.run(calls_at_once, gateway.url, TOOL, callers, 10)
    assert len(answers) == 40
    for name, is_error, text in answers:
        assert (is_error, text) == (False, name)
    # Every request upstream carried one person's key, in the header and form the admin named.
    assert set(upstream.received) == {"Key key-of-alice-1", "Key key-of-bob"}
    # Each call's record names the upstream account it used (never the key).
    anyio.run(gateway.recorder.flush)
    accounts = {a.person.username: a.pk for a in UpstreamAccount.objects.select_related("person")}
    records = list(ToolCall.objects.filter(name=TOOL))
    assert len(records) == 40
    for record in records:
        assert record.upstream_account_id == accounts[record.person_name]
        assert "key-of" not in f"{record.error} {record.arguments}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_no_key_an_agent_a_replaced_key_and_a_refused_key(world, upstream, gateway):
    token = person_access_token(world["carol"], world["team"])
    is_error, text = anyio.run(whoami, gateway.url, token)
    assert is_error
    assert "you have not entered yours: enter it at http://127.0.0.1:8000/portal/accounts/" in text
    agent = AgentTokenFactory(team=world["team"])
    is_error, text = anyio.run(whoami, gateway.url, agent.plain)
    assert is_error
    assert "an agent token has no person" in text
    assert upstream.received == []  # neither reached the upstream
    enter(world["carol"], "key-of-alice-1")
    assert anyio.run(whoami, gateway.url, token) == (False, "alice")
    # Replaced: the very next call carries the new key (the gateway held the old one).
    enter(world["carol"], "key-of-alice-2")
    assert anyio.run(whoami, gateway.url, token) == (False, "alice (second key)")
    # A key the upstream refuses (401): the account is marked broken and the call says so.
    enter(world["carol"], "not-a-key")
    is_error, text = anyio.run(whoami, gateway.url, token)
    assert is_error
    assert "refused your token or API key: enter a new one at" in text
    account = UpstreamAccount.objects.get(person=world["carol"])
    assert account.state == AccountState.BROKEN
    assert account.tokens == {}
    page = portal(world["carol"]).get("/portal/accounts/").content.decode()
    assert "Broken: enter a new one" in page
    enter(world["carol"], "key-of-bob")
    assert anyio.run(whoami, gateway.url, token) == (False, "bob")
    # The records: the refused calls used no account; the others carol's, shown in the admin.
    anyio.run(gateway.recorder.flush)
    used = [
        (record.outcome, record.upstream_account_id)
        for record in ToolCall.objects.filter(person_name="carol").order_by("started_at", "id")
    ]
    assert used == [
        (CallOutcome.REFUSED, None),
        (CallOutcome.OK, account.pk),
        (CallOutcome.OK, account.pk),
        (CallOutcome.FAILED, account.pk),
        (CallOutcome.OK, account.pk),
    ]
    staff = UserFactory(username="root", is_staff=True, is_superuser=True)
    listed = portal(staff).get("/admin/gateway/toolcall/").content.decode()
    assert f"account #{account.pk}" in listed


@pytest.mark.django_db
def test_the_explanation_names_the_secret(world):
    from registry.access.explain import RULE_UPSTREAM_ACCOUNT, access_explain
    from registry.servers.models import Tool

    team = world["team"]
    explanation = access_explain(
        team=team,
        role=team.roles.get(name="operations"),
        tool=Tool.objects.get(server=world["server"], name="whoami"),
    )
    (rule,) = [result for result in explanation.rules if result.rule == RULE_UPSTREAM_ACCOUNT]
    assert rule.facts == {"upstream_auth": UpstreamAuth.PERSON_SECRET}
    assert "the token or API key they entered" in rule.reason
