"""The team-facing API: teams, browsing, grants, access requests, agent tokens; restricted to the
caller's teams so that team A never sees nor learns of team B's rows, in answers or in errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from registry.servers import services as server_services
from registry.teams import services
from registry.teams.models import AccessRequest, AgentToken, MembershipLevel
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, ToolFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def world(charlie, dave, committed):
    """charlie owns alpha; dave is a member of beta; beta has a grant, a request, an agent."""
    with committed():
        alpha = TeamFactory(slug="alpha")
        beta = TeamFactory(slug="beta")
        services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
        services.team_member_set(actor="test", team=beta, user=dave)
        files = approved_server("files", {"read_file": READ, "write_file": WRITE})
        secret = approved_server("secret-sauce", {"recipe": READ})
        beta_grant = GrantFactory(team=beta, server=secret)
        beta_request = services.access_request_create(
            actor=dave, team=beta, server=files, justification="we need it"
        )
        beta_agent = AgentTokenFactory(team=beta, name="beta-bot")
    return {
        "alpha": alpha,
        "beta": beta,
        "files": files,
        "secret": secret,
        "beta_grant": beta_grant,
        "beta_request": beta_request,
        "beta_agent": beta_agent,
    }


def _as(api_client, user):
    api_client.force_authenticate(user=None)
    api_client.force_login(user)
    return api_client


def _ask(client, **data):
    return client.post("/api/v1/access-requests", data, format="json")


def test_a_member_sees_only_their_teams(api_client, world, charlie):
    body = _as(api_client, charlie).get("/api/v1/teams").json()

    assert [team["slug"] for team in body["results"]] == ["alpha"]
    assert api_client.get("/api/v1/teams/beta").status_code == 404


def test_lists_hold_only_the_callers_team_rows(api_client, world, charlie):
    client = _as(api_client, charlie)

    for path in ("/api/v1/grants", "/api/v1/access-requests", "/api/v1/agents"):
        assert client.get(path).json()["results"] == [], path
        assert client.get(path, {"team": "beta"}).json()["results"] == [], path


def test_another_teams_row_is_404_exactly_like_a_missing_one(api_client, world, charlie):
    client = _as(api_client, charlie)
    pairs = [
        ("/api/v1/grants", world["beta_grant"].pk),
        ("/api/v1/access-requests", world["beta_request"].pk),
        ("/api/v1/agents", world["beta_agent"].pk),
    ]
    for path, pk in pairs:
        foreign = client.get(f"{path}/{pk}")
        missing = client.get(f"{path}/999999")
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
    revoke = client.post(f"/api/v1/agents/{world['beta_agent'].pk}/revoke", {}, format="json")
    assert revoke.status_code == 404
    assert AgentToken.objects.get(pk=world["beta_agent"].pk).revoked_at is None


def test_asking_for_another_team_is_answered_like_asking_for_no_team(api_client, world, charlie):
    client = _as(api_client, charlie)

    foreign = _ask(client, team="beta", server="files", justification="x")
    missing = _ask(client, team="gamma", server="files", justification="x")

    assert foreign.status_code == missing.status_code == 400
    assert foreign.json()["error"]["fields"]["team"] == [
        message.replace("gamma", "beta") for message in missing.json()["error"]["fields"]["team"]
    ]


def test_another_teams_open_request_does_not_block_nor_show(api_client, world, charlie):
    response = _ask(_as(api_client, charlie), team="alpha", server="files", justification="also us")

    assert response.status_code == 201
    assert "beta" not in response.content.decode()


def test_browsing_shows_the_approved_offer_and_nothing_about_grants(
    api_client, world, charlie, dave
):
    as_charlie = _as(api_client, charlie).get("/api/v1/servers").json()
    as_dave = _as(api_client, dave).get("/api/v1/servers").json()

    assert as_charlie == as_dave
    assert [server["slug"] for server in as_charlie["results"]] == ["files", "secret-sauce"]
    assert "beta" not in str(as_charlie)


def test_browsing_hides_unapproved_servers_and_unvetted_descriptions(
    api_client, world, charlie, committed
):
    ToolFactory(server=world["files"], name="new_tool")
    draft = approved_server("draft-one")
    with committed():
        server_services.server_suspend(actor="test", server=draft, reason="x")

    body = _as(api_client, charlie).get("/api/v1/servers/files").json()
    new_tool = next(t for t in body["tools"] if t["name"] == "new_tool")

    assert (new_tool["approved"], new_tool["description"]) == (False, "")
    assert api_client.get("/api/v1/servers/draft-one").status_code == 404


def test_a_member_asks_for_a_tool_and_a_duplicate_is_refused(api_client, world, charlie):
    client = _as(api_client, charlie)
    wished = (timezone.now() + timedelta(days=30)).isoformat()

    first = _ask(
        client,
        team="alpha",
        server="files",
        tool="write_file",
        role="implementation",
        justification="we write reports",
        wished_expires_at=wished,
    )
    again = _ask(
        client,
        team="alpha",
        server="files",
        tool="write_file",
        role="implementation",
        justification="please",
    )

    assert first.status_code == 201
    assert first.json()["state"] == "pending"
    assert first.json()["waiting_for"] == ""
    assert again.status_code == 400
    assert "open request" in again.json()["error"]["message"]


def test_a_request_for_a_tool_not_approved_yet_says_why_it_waits(api_client, world, charlie):
    ToolFactory(server=world["files"], name="delete_file")

    response = _ask(
        _as(api_client, charlie),
        team="alpha",
        server="files",
        tool="delete_file",
        justification="cleanup",
    )

    assert response.status_code == 201
    assert "not approved yet" in response.json()["waiting_for"]


def test_only_owners_create_and_revoke_agent_tokens(api_client, world, charlie, dave, committed):
    as_dave = _as(api_client, dave).post(
        "/api/v1/agents", {"team": "beta", "role": "review", "name": "mine"}, format="json"
    )
    assert as_dave.status_code == 403

    client = _as(api_client, charlie)
    created = client.post(
        "/api/v1/agents",
        {
            "team": "alpha",
            "role": "review",
            "name": "ci-bot",
            "declared_servers": {"required": ["files"]},
        },
        format="json",
    )
    assert created.status_code == 201
    plain = created.json()["token"]
    assert plain.startswith("trm_")
    token = AgentToken.objects.get(pk=created.json()["id"])
    assert plain not in (token.secret_hash, token.prefix)
    assert "token" not in client.get(f"/api/v1/agents/{token.pk}").json()

    with committed():
        revoked = client.post(
            f"/api/v1/agents/{token.pk}/revoke", {"reason": "rotated"}, format="json"
        )
    assert revoked.status_code == 200
    assert revoked.json()["usable"] is False
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert api_client.get("/api/v1/catalogue").status_code == 401


def test_an_agent_token_cannot_use_the_team_endpoints(api_client, world):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['beta_agent'].plain}")

    response = api_client.get("/api/v1/grants")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


def test_people_cannot_read_a_catalogue_without_an_agent_token(api_client, world, charlie):
    response = _as(api_client, charlie).get("/api/v1/catalogue")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_agent_list_shows_the_last_use_from_the_cache(api_client, world, dave):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['beta_agent'].plain}")
    api_client.get("/api/v1/catalogue")
    api_client.credentials()

    body = _as(api_client, dave).get("/api/v1/agents").json()

    assert body["results"][0]["last_used_at"] is not None


def test_a_member_withdraws_their_request(api_client, world, dave):
    response = _as(api_client, dave).post(
        f"/api/v1/access-requests/{world['beta_request'].pk}/withdraw"
    )

    assert response.status_code == 200
    assert AccessRequest.objects.get(pk=world["beta_request"].pk).state == "withdrawn"


def test_a_tool_request_for_an_approved_tool_can_be_granted(world, dave, committed):
    with committed():
        request = services.access_request_create(
            actor=dave,
            team=world["beta"],
            server=world["files"],
            tool=tool_of(world["files"], "write_file"),
            justification="writing",
        )
        services.access_request_approve(actor="test", request=request)
    assert world["beta"].grants.filter(tool__name="write_file").exists()


def test_a_team_filter_that_is_no_slug_is_refused_not_a_server_error(api_client, world, charlie):
    response = _as(api_client, charlie).get("/api/v1/access-requests", {"team": "a\x00b"})

    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]


def test_a_server_or_team_that_is_no_slug_is_answered_like_a_missing_one(
    api_client, world, charlie
):
    client = _as(api_client, charlie)

    bad_server = _ask(client, team="alpha", server="fi\x00les", justification="x")
    bad_team = _ask(client, team="al\x00pha", server="files", justification="x")

    assert bad_server.status_code == bad_team.status_code == 400
    assert "does not exist" in bad_server.json()["error"]["fields"]["server"][0]
    assert "does not exist" in bad_team.json()["error"]["fields"]["team"][0]


def test_only_owners_choose_how_the_gateway_offers_tools(api_client, world, charlie, dave):
    """Team default and per token (docs/gateway.md, "Search mode"): owners only, audited."""
    member = _as(api_client, dave)
    assert (
        member.post("/api/v1/teams/beta/tool-exposure", {"tool_exposure": "search"}, format="json")
    ).status_code == 403
    agent = world["beta_agent"]
    assert (
        member.post(
            f"/api/v1/agents/{agent.pk}/tool-exposure", {"tool_exposure": "all"}, format="json"
        )
    ).status_code == 403

    owner = _as(api_client, charlie)
    answer = owner.post(
        "/api/v1/teams/alpha/tool-exposure", {"tool_exposure": "search"}, format="json"
    )
    assert answer.status_code == 200
    assert answer.json()["tool_exposure"] == "search"
    assert (
        owner.post("/api/v1/teams/alpha/tool-exposure", {"tool_exposure": "some"}, format="json")
    ).status_code == 400
    token = AgentTokenFactory(team=world["alpha"], name="alpha-bot")
    answer = owner.post(
        f"/api/v1/agents/{token.pk}/tool-exposure", {"tool_exposure": "all"}, format="json"
    )
    assert answer.status_code == 200
    assert answer.json()["tool_exposure"] == "all"
    assert (
        owner.post(f"/api/v1/agents/{token.pk}/tool-exposure", {"tool_exposure": ""}, format="json")
    ).json()["tool_exposure"] == ""
    from registry.audit.models import AuditEvent

    assert set(
        AuditEvent.objects.filter(action__contains="tool_exposure").values_list("action", flat=True)
    ) == {"team.tool_exposure_set", "agent_token.tool_exposure_set"}
