"""Issue 11, item 5: deleting a team deletes its Django group with it (one transaction, audited),
so a new team with the same slug inherits no members, permissions, grants or tokens."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.teams import services
from registry.teams.models import Team, TeamAction, teams_for_user
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _team_with_member(alice, slug="payments"):
    team = services.team_create(actor=alice, slug=slug)
    member = UserFactory(username=f"{slug}-member")
    services.team_member_set(actor=alice, team=team, user=member)
    return team, member


def test_deleting_a_team_deletes_its_group_and_audits_it(alice):
    team, member = _team_with_member(alice)

    services.team_delete(actor=alice, team=team)

    assert not Team.objects.exists()
    assert not Group.objects.filter(name="team:payments").exists()
    assert not member.groups.exists()
    event = AuditEvent.objects.get(action="team.deleted")
    assert event.before["members"] == ["payments-member"]


def test_a_new_team_with_the_same_slug_inherits_nothing(alice):
    team, member = _team_with_member(alice)
    services.team_delete(actor=alice, team=team)

    services.team_create(actor=alice, slug="payments")

    member.refresh_from_db()
    assert not member.groups.exists()
    assert not teams_for_user(member, TeamAction.VIEW).exists()


def test_a_group_left_by_a_team_deleted_earlier_is_not_inherited(alice):
    """Teams deleted before the fix left their group behind; the new team starts clean."""
    member = UserFactory(username="old-member")
    leftover = Group.objects.create(name="team:payments")
    member.groups.add(leftover)

    team = services.team_create(actor=alice, slug="payments")

    assert team.group.pk != leftover.pk
    assert not member.groups.exists()
    assert AuditEvent.objects.filter(action="team.leftover_group_deleted").exists()


def test_the_admin_delete_page_deletes_the_group(client, alice):
    team, _member = _team_with_member(alice)
    client.force_login(alice)

    response = client.post(reverse("admin:teams_team_delete", args=[team.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert not Group.objects.filter(name="team:payments").exists()
    assert AuditEvent.objects.filter(action="team.deleted", actor=alice).exists()


def test_the_admin_bulk_delete_deletes_the_groups(client, alice):
    _team_with_member(alice, "payments")
    _team_with_member(alice, "billing")
    client.force_login(alice)

    client.post(
        reverse("admin:teams_team_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": list(Team.objects.values_list("pk", flat=True)),
            "post": "yes",
        },
    )

    assert not Team.objects.exists()
    assert not Group.objects.filter(name__startswith="team:").exists()
    assert AuditEvent.objects.filter(action="team.deleted").count() == 2


def test_a_team_with_agent_tokens_can_be_deleted_and_its_tokens_go_with_it(alice):
    """A token's role is a protected key: the team's cascade alone refused (ProtectedError)."""
    from registry.teams.models import AgentToken, TeamRole

    team, _ = _team_with_member(alice)
    role = TeamRole.objects.filter(team=team).first() or TeamRole.objects.create(
        team=team, name="operations"
    )
    services.agent_token_create(actor=alice, team=team, role=role, name="ci-agent")

    services.team_delete(actor=alice, team=team)

    assert not Team.objects.exists()
    assert not AgentToken.objects.exists()
    assert AuditEvent.objects.get(action="team.deleted").before["agent_tokens"] == 1
