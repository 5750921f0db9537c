"""People's tokens at the gateway and the REST API: the 401s that say which failure it was and
name the protected resource's metadata, the metadata itself, every call rule plus "still an active
member of that team" (refused on the very next call, inside an open session too), team isolation,
call records that name the person and the app, and a warm call that makes no database query."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.test import Client as HttpClient
from mcp import MCPError

from registry.access import rules as checks
from registry.core.process_cache import forget_all
from registry.gateway.checks import call_check
from registry.gateway.models import CallOutcome, ToolCall
from registry.oauth.models import AccessToken, ClientAuthorization
from registry.oauth.services import client_authorization_revoke
from registry.oauth.tokens import access_tokens_forget, person_token_authenticate
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)
from tests.oauth_helpers import register_client, sign_in_tokens

RESOURCE_METADATA = (
    'resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"'
)


def _choice(team, role: str) -> str:
    return f"{team.pk}:{team.roles.get(name=role).pk}"


def person_tokens(user, team, role: str = "operations") -> dict[str, Any]:
    http = HttpClient()
    http.force_login(user)
    return sign_in_tokens(http, register_client(HttpClient(), name="Editor"), _choice(team, role))


# --- The call check and the warm path (no processes) ---------------------------------------------


@pytest.fixture
def checks_world(charlie, committed):
    forget_all()
    with committed():
        alpha = TeamFactory(slug="alpha")
        team_services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
        files = approved_server("files", {"read_file": READ, "write_file": WRITE})
        GrantFactory(team=alpha, server=files)
    return alpha


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
class TestTheCallCheck:
    def test_a_persons_call_obeys_the_role_they_consented_to(self, checks_world, charlie):
        tokens = person_tokens(charlie, checks_world, role="review")
        identity = person_token_authenticate(tokens["access_token"]).identity
        assert call_check(
            identity=identity, name="files__read_file", arguments={"value": "x"}
        ).allowed
        refused = call_check(identity=identity, name="files__write_file", arguments={"value": "x"})
        assert refused.code == checks.ROLE_FORBIDS

    @pytest.mark.usefixtures("no_periodic_queries")
    def test_a_warm_call_with_a_persons_token_makes_no_query(
        self, checks_world, charlie, django_assert_num_queries
    ):
        from workers.gateway.auth import CheckedTokens

        tokens = person_tokens(charlie, checks_world)
        checked = CheckedTokens()
        for _ in range(2):  # the first checks the token, the second confirms it at the version
            principal, version = checked.authenticate(plain=tokens["access_token"])
            call_check(
                identity=principal.caller, name="files__read_file", arguments={}, version=version
            )
        with django_assert_num_queries(0):
            principal, version = checked.authenticate(plain=tokens["access_token"])
            decision = call_check(
                identity=principal.caller,
                name="files__read_file",
                arguments={"value": "x"},
                version=version,
            )
        assert decision.allowed
        assert version is not None

    def test_a_person_removed_from_the_team_is_refused_on_the_next_check(
        self, checks_world, charlie, committed
    ):
        from workers.gateway.auth import CheckedTokens

        tokens = person_tokens(charlie, checks_world)
        checked = CheckedTokens()
        for _ in range(2):
            principal, version = checked.authenticate(plain=tokens["access_token"])
        with committed():
            team_services.team_member_remove(actor="test", team=checks_world, user=charlie)
        principal, version = checked.authenticate(plain=tokens["access_token"])
        decision = call_check(
            identity=principal.caller, name="files__read_file", arguments={}, version=version
        )
        assert decision.code == checks.PERSON_NOT_MEMBER
        assert "charlie is no longer a member of 'alpha'" in decision.message

    def test_a_deactivated_person_is_refused_on_the_next_check(
        self, checks_world, charlie, committed
    ):
        from workers.gateway.auth import CheckedTokens

        tokens = person_tokens(charlie, checks_world)
        checked = CheckedTokens()
        for _ in range(2):
            checked.authenticate(plain=tokens["access_token"])
        with committed():
            charlie.is_active = False
            charlie.save()
        principal, version = checked.authenticate(plain=tokens["access_token"])
        decision = call_check(
            identity=principal.caller, name="files__read_file", arguments={}, version=version
        )
        assert decision.code == checks.PERSON_INACTIVE

    def test_the_catalogue_api_takes_a_persons_token_under_the_same_rules(
        self, checks_world, charlie, committed, api_client
    ):
        tokens = person_tokens(charlie, checks_world, role="review")
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access_token']}")
        listed = api_client.get("/api/v1/catalogue", {"format": "mcp"})
        assert listed.status_code == 200, listed.content
        assert [tool["name"] for tool in listed.json()["tools"]] == ["files__read_file"]
        refused = api_client.post(
            "/api/v1/tools/files__write_file/call", {"arguments": {}}, format="json"
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == checks.ROLE_FORBIDS
        # A person's app is not the person: it cannot manage the team's agents.
        assert api_client.get("/api/v1/agents").status_code == 403
        with committed():
            team_services.team_member_remove(actor="test", team=checks_world, user=charlie)
        gone = api_client.get("/api/v1/catalogue")
        assert gone.status_code == 403
        assert "no longer a member" in gone.json()["error"]["message"]

    def test_a_bad_person_token_at_the_api_says_why(self, checks_world, charlie, api_client):
        tokens = person_tokens(charlie, checks_world)
        client_authorization_revoke(actor=charlie, authorization=ClientAuthorization.objects.get())
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access_token']}")
        answer = api_client.get("/api/v1/catalogue")
        assert answer.status_code == 401
        assert "was revoked" in answer.json()["error"]["message"]


# --- The running gateway ---------------------------------------------------------------------


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def world(http_scenario_server, charlie):  # noqa: F811 (the fixture imported above)
    """alpha (charlie, owner) holds the HTTP server `echo`; beta (erin) holds nothing."""
    server = discovered_http_server("echo", http_scenario_server.url)
    alpha = TeamFactory(slug="alpha")
    team_services.team_member_set(
        actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
    )
    GrantFactory(team=alpha, server=server)
    beta = TeamFactory(slug="beta")
    erin = UserFactory(username="erin")
    team_services.team_member_set(actor="test", team=beta, user=erin, level=MembershipLevel.OWNER)
    return {"alpha": alpha, "beta": beta, "erin": erin}


processes = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]


def _challenge(gateway, token: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    answer = httpx2.post(
        gateway.url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    )
    return answer.status_code, answer.headers.get("www-authenticate", "")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_the_gateway_answers_401_saying_which_failure_and_where_its_metadata_is(
    gateway, world, charlie
):
    tokens = person_tokens(charlie, world["alpha"])
    expired = person_tokens(charlie, world["alpha"], role="review")["access_token"]
    AccessToken.objects.filter(pk=person_token_authenticate(expired).identity.token_id).update(
        expires="2020-01-01T00:00:00Z"
    )
    elsewhere = person_tokens(world["erin"], world["beta"])["access_token"]
    AccessToken.objects.filter(pk=person_token_authenticate(elsewhere).identity.token_id).update(
        resource=["https://elsewhere.example/api"]
    )
    # Those two rows were edited behind the services' back: drop their cached lookups.
    access_tokens_forget(
        access_token_ids=list(
            AccessToken.objects.filter(authorization__isnull=False).values_list("pk", flat=True)
        )
    )
    descriptions = {}
    for case, token in {
        "missing": None,
        "malformed": "not-a-token",
        "unknown": "tra_" + "x" * 43,
        "expired": expired,
        "wrong_audience": elsewhere,
    }.items():
        status, challenge = _challenge(gateway, token)
        assert status == 401, case
        assert challenge.startswith('Bearer error="invalid_token", error_description="'), challenge
        assert RESOURCE_METADATA in challenge
        descriptions[case] = challenge.split('error_description="')[1].split('"')[0]
    client_authorization_revoke(
        actor=charlie,
        authorization=ClientAuthorization.objects.get(role__name="operations", person=charlie),
    )
    status, challenge = _challenge(gateway, tokens["access_token"])
    assert status == 401
    descriptions["revoked"] = challenge.split('error_description="')[1].split('"')[0]
    assert "No access token was sent" in descriptions["missing"]
    assert "malformed" in descriptions["malformed"]
    assert "not one Toolroom issued" in descriptions["unknown"]
    assert "has expired" in descriptions["expired"]
    assert "another resource" in descriptions["wrong_audience"]
    assert "was revoked" in descriptions["revoked"]
    assert len(set(descriptions.values())) == 6


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_the_gateway_serves_its_protected_resource_metadata(gateway, world):
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        data = httpx2.get(gateway.base + path).json()
        assert data["resource"] == "http://127.0.0.1:8000/mcp"
        assert data["authorization_servers"] == ["http://127.0.0.1:8000"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_person_removed_from_the_team_mid_session_is_refused_on_the_next_call(
    gateway, world, charlie, mode
):
    tokens = person_tokens(charlie, world["alpha"])

    async def run():
        async with gateway_client(gateway.url, tokens["access_token"], mode=mode) as client:
            listed = await client.list_tools()
            first = await client.call_tool("echo__echo", {"text": "hello"})
            await anyio.to_thread.run_sync(
                lambda: team_services.team_member_remove(
                    actor="test", team=world["alpha"], user=charlie
                )
            )
            second = await client.call_tool("echo__echo", {"text": "again"})
        # A new list is refused too (a 2026-07-28 client may keep the last one for its ttl).
        async with gateway_client(gateway.url, tokens["access_token"], mode=mode) as client:
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
        return listed, first, second, listing.value

    listed, first, second, listing = anyio.run(run)
    assert [tool.name for tool in listed.tools] == ["echo__add", "echo__echo", "echo__sleep"]
    assert text_of(first) == "hello"
    assert second.is_error
    assert "charlie is no longer a member of 'alpha'" in text_of(second)
    assert "no longer a member" in listing.message
    anyio.run(gateway.recorder.flush)
    records = list(ToolCall.objects.order_by("started_at"))
    assert [(r.outcome, r.person_name, r.client_name, r.role_name) for r in records] == [
        (CallOutcome.OK, "charlie", "Editor", "operations"),
        (CallOutcome.REFUSED, "charlie", "Editor", "operations"),
    ]
    assert records[0].person_id == charlie.pk
    assert records[1].error_class == checks.PERSON_NOT_MEMBER


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
@pytest.mark.processes
def test_a_person_sees_and_calls_only_their_own_teams_tools(gateway, world):
    tokens = person_tokens(world["erin"], world["beta"])

    async def run():
        async with gateway_client(gateway.url, tokens["access_token"]) as client:
            listed = await client.list_tools()
            with pytest.raises(MCPError) as refused:
                await client.call_tool("echo__echo", {"text": "hi"})
            return listed, refused.value

    listed, refused = anyio.run(run)
    assert listed.tools == []
    assert "No tool named 'echo__echo'" in refused.message
    assert get_user_model().objects.filter(username="erin").exists()


# --- Audit and the portal -----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_a_person_sees_their_own_calls_and_the_admin_filters_calls_by_person(charlie, dave, alice):
    import time

    from registry.gateway.services import ToolCallRecord, tool_calls_record

    alpha = TeamFactory(slug="alpha")
    now = time.time()
    tool_calls_record(
        records=[
            ToolCallRecord(
                started_at=now - index,
                duration_ms=3.0,
                name=name,
                via="mcp",
                outcome=CallOutcome.OK,
                team_id=alpha.pk,
                person_id=person.pk,
                person_name=person.username,
                client_name="Editor",
                role_name="review",
            )
            for index, (person, name) in enumerate(
                [(charlie, "files__read_file"), (dave, "files__secret_of_dave")]
            )
        ]
    )
    http = HttpClient()
    http.force_login(charlie)
    page = http.get("/portal/calls/").content.decode()
    assert "files__read_file" in page
    assert "files__secret_of_dave" not in page
    admin = HttpClient()
    admin.force_login(alice)
    listed = admin.get(f"/admin/gateway/toolcall/?person__id__exact={dave.pk}").content.decode()
    assert "files__secret_of_dave" in listed
    assert "files__read_file" not in listed
    assert "dave (through Editor)" in listed


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_the_connect_page_gives_people_the_gateway_url_alone_and_says_when_to_use_a_token(
    checks_world, charlie
):
    http = HttpClient()
    http.force_login(charlie)
    page = http.get("/portal/teams/alpha/connect/").content.decode()
    assert "claude mcp add --transport http toolroom http://127.0.0.1:8000/mcp/" in page
    assert "For a headless agent" in page
