"""Teams in the admin: team pages with members, grants and agents; access requests decided one by
one and in bulk; agent tokens shown once; all through the services."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from registry.teams import services
from registry.teams.models import AccessRequest, AgentToken, Grant, Team
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, ToolFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


def test_the_team_page_shows_members_grants_agents_and_requests(client, alice, team, charlie):
    server = approved_server("files")
    GrantFactory(team=team, server=server)
    AgentTokenFactory(team=team, name="ci-bot")
    services.access_request_create(
        actor=charlie, team=team, server=approved_server("other", {"x": READ}), justification="j"
    )
    client.force_login(alice)

    page = client.get(reverse("admin:teams_team_change", args=[team.pk]))
    listing = client.get(reverse("admin:teams_team_changelist"))

    assert page.status_code == 200
    content = page.content.decode()
    assert "charlie" in content
    assert "files" in content
    assert "ci-bot" in content
    assert "other" in content  # the pending request
    assert listing.status_code == 200


def test_an_admin_creates_a_team_through_the_service(client, alice):
    client.force_login(alice)

    response = client.post(
        reverse("admin:teams_team_add"),
        {
            "name": "Beta",
            "slug": "beta",
            "description": "",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
            "roles-TOTAL_FORMS": "0",
            "roles-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302
    team = Team.objects.get(slug="beta")
    assert team.group.name == "team:beta"
    assert team.roles.count() == 3


def test_an_admin_approves_requests_in_bulk_and_pending_tools_are_skipped(
    client, alice, team, charlie
):
    server = approved_server("files", {"a": READ})
    pending_tool = ToolFactory(server=server, name="b")
    ok = services.access_request_create(
        actor=charlie, team=team, server=server, tool=server.tools.get(name="a"), justification="j"
    )
    waiting = services.access_request_create(
        actor=charlie, team=team, server=server, tool=pending_tool, justification="j"
    )
    client.force_login(alice)

    response = client.post(
        reverse("admin:teams_accessrequest_changelist"),
        {
            "action": "approve_selected",
            "_selected_action": [ok.pk, waiting.pk],
            "confirm": "1",
            "reason": "",
            "expires_at": "",
        },
        follow=True,
    )

    assert response.status_code == 200
    assert AccessRequest.objects.get(pk=ok.pk).state == "approved"
    assert AccessRequest.objects.get(pk=waiting.pk).state == "pending"
    assert "not approved yet" in response.content.decode()


def test_an_admin_denies_one_request_with_a_reason(client, alice, team, charlie):
    request = services.access_request_create(
        actor=charlie, team=team, server=approved_server("files"), justification="j"
    )
    client.force_login(alice)
    url = reverse("admin:teams_accessrequest_decide", args=[request.pk, "deny"])

    assert client.get(url).status_code == 200
    client.post(url, {"confirm": "1", "reason": "use the other one"})

    request.refresh_from_db()
    assert (request.state, request.decision_reason) == ("denied", "use the other one")


def test_an_admin_approves_one_request_with_a_shorter_expiry(client, alice, team, charlie):
    request = services.access_request_create(
        actor=charlie,
        team=team,
        server=approved_server("files"),
        justification="j",
        wished_expires_at=timezone.now() + timedelta(days=30),
    )
    client.force_login(alice)
    shorter = timezone.now() + timedelta(days=2)

    client.post(
        reverse("admin:teams_accessrequest_decide", args=[request.pk, "approve"]),
        {"confirm": "1", "reason": "", "expires_at": shorter.strftime("%Y-%m-%d %H:%M:%S")},
    )

    grant = Grant.objects.get(team=team)
    assert grant.expires_at is not None
    assert abs((grant.expires_at - shorter).total_seconds()) < 1
    # The request's page shows both ends: the one wished and the one granted.
    page = client.get(reverse("admin:teams_accessrequest_change", args=[request.pk]))
    text = page.content.decode()
    assert "Granted until" in text
    assert timezone.localtime(grant.expires_at).strftime("%Y-%m-%d %H:%M") in text
    assert "Wished expires at" in text


def test_a_created_agent_token_is_shown_on_its_page_only(client, alice, team):
    client.force_login(alice)

    response = client.post(
        reverse("admin:teams_agenttoken_add"),
        {
            "team": team.pk,
            "role": team.roles.get(name="review").pk,
            "name": "admin-made",
            "expires_at": "",
            "declared_servers": "{}",
        },
    )

    token = AgentToken.objects.get(name="admin-made")
    assert response.status_code == 200
    assert f"trm_{token.prefix}_" in response.content.decode()
    assert not list(response.wsgi_request._messages)


def test_an_admin_revokes_grants_in_bulk_with_a_reason(client, alice, team):
    grant = GrantFactory(team=team, server=approved_server("files"))
    client.force_login(alice)

    client.post(
        reverse("admin:teams_grant_changelist"),
        {
            "action": "revoke_selected",
            "_selected_action": [grant.pk],
            "confirm": "1",
            "reason": "x",
        },
    )

    grant.refresh_from_db()
    assert (grant.revoked_at is not None, grant.revoke_reason) == (True, "x")


def test_adding_a_member_in_the_admin_gives_guardian_permissions(client, alice, team, dave):
    from registry.teams.models import teams_for_user

    client.force_login(alice)
    roles = list(team.roles.order_by("pk"))
    data = {
        "name": team.name,
        "description": "",
        "memberships-TOTAL_FORMS": "2",
        "memberships-INITIAL_FORMS": "1",
        "memberships-0-id": team.memberships.get().pk,
        "memberships-0-team": team.pk,
        "memberships-0-user": team.memberships.get().user_id,
        "memberships-0-level": "member",
        "memberships-1-team": team.pk,
        "memberships-1-user": dave.pk,
        "memberships-1-level": "owner",
        "roles-TOTAL_FORMS": str(len(roles)),
        "roles-INITIAL_FORMS": str(len(roles)),
    }
    for index, role in enumerate(roles):
        data |= {
            f"roles-{index}-id": role.pk,
            f"roles-{index}-team": team.pk,
            f"roles-{index}-name": role.name,
            f"roles-{index}-description": role.description,
            f"roles-{index}-allows_read": "on" if role.allows_read else "",
            f"roles-{index}-allows_write": "on" if role.allows_write else "",
            f"roles-{index}-allows_connect": "on" if role.allows_connect else "",
        }
    data = {key: value for key, value in data.items() if value != ""}

    response = client.post(reverse("admin:teams_team_change", args=[team.pk]), data)

    assert response.status_code == 302
    assert list(teams_for_user(dave, "manage")) == [team]
