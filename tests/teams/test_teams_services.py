"""Teams, grants, access requests and agent tokens through their services: guardian permissions,
audit, the rules of requests and approvals, token storage, and the catalogue versions."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.catalogue.versions import CatalogueState, _states_set_if_newer, catalogue_state
from registry.core.cache import catalogue_cache
from registry.core.errors import ApplicationError
from registry.servers import services as server_services
from registry.teams import services
from registry.teams.models import AccessRequestState, Grant, MembershipLevel, Team, teams_for_user
from registry.teams.tokens import TOKEN_RE, token_authenticate, token_mark_used
from tests.catalogue_helpers import READ, approved_server, tool_of
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, ToolFactory

pytestmark = pytest.mark.django_db


def test_it_backs_a_team_with_a_group_and_guardian_permissions(team, charlie, dave):
    assert team.group.name == "team:alpha"
    assert list(teams_for_user(charlie, "view")) == [team]
    assert list(teams_for_user(charlie, "manage")) == []
    assert list(teams_for_user(dave, "view")) == []

    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    assert list(teams_for_user(charlie, "manage")) == [team]

    services.team_member_remove(actor="test", team=team, user=charlie)
    assert list(teams_for_user(charlie, "view")) == []
    assert list(teams_for_user(charlie, "manage")) == []


def test_a_team_starts_with_roles_by_permission_class(team):
    roles = {role.name: role.permission_classes for role in team.roles.all()}

    assert roles == {
        "review": ["read"],
        "implementation": ["read", "write"],
        "operations": ["read", "write", "connect"],
    }


def test_a_role_must_allow_something(team):
    with pytest.raises(ApplicationError, match="at least one"):
        services.role_create(actor="test", team=team, name="nothing", allows_read=False)


def test_granting_again_changes_the_expiry_instead_of_adding_a_grant(team):
    server = approved_server("files")
    first = services.grant_create(actor="test", team=team, server=server)
    later = timezone.now() + timedelta(days=3)

    again = services.grant_create(actor="test", team=team, server=server, expires_at=later)

    assert again.pk == first.pk
    assert Grant.objects.get().expires_at == later
    assert AuditEvent.objects.filter(action="grant.updated").count() == 1


def test_a_tool_grant_must_name_a_tool_of_the_server(team):
    server, other = approved_server("files"), approved_server("other", {"x": READ})

    with pytest.raises(ApplicationError, match="belong to the granted server"):
        services.grant_create(actor="test", team=team, server=server, tool=tool_of(other, "x"))


def test_grants_and_revocations_are_audited_and_bump_the_version(team, committed):
    server = approved_server("files")
    before = Team.objects.get(pk=team.pk).catalogue_version

    with committed():
        grant = services.grant_create(actor="test", team=team, server=server)
        services.grant_revoke(actor="test", grant=grant, reason="done")

    assert Team.objects.get(pk=team.pk).catalogue_version == before + 2
    assert [e.action for e in AuditEvent.objects.filter(target_type="grant")] == [
        "grant.revoked",
        "grant.created",
    ]


def test_an_approval_bumps_only_the_teams_granted_the_server(team, committed):
    server = approved_server("files")
    bystander = TeamFactory(slug="bystander")
    GrantFactory(team=team, server=server)
    tool = ToolFactory(server=server, name="new")
    versions = dict(Team.objects.values_list("slug", "catalogue_version"))

    with committed():
        server_services.tool_approve(actor="test", tool=tool)

    after = dict(Team.objects.values_list("slug", "catalogue_version"))
    assert after["alpha"] == versions["alpha"] + 1
    assert after["bystander"] == versions["bystander"]
    assert bystander.pk


# --- Access requests ----------------------------------------------------------------------------


def test_approving_a_request_creates_the_grant_with_a_shorter_expiry(team, charlie):
    server = approved_server("files")
    wished = timezone.now() + timedelta(days=30)
    request = services.access_request_create(
        actor=charlie, team=team, server=server, justification="x", wished_expires_at=wished
    )
    shorter = timezone.now() + timedelta(days=7)

    with pytest.raises(ApplicationError, match="not longer"):
        services.access_request_approve(
            actor="admin", request=request, expires_at=wished + timedelta(days=1)
        )
    approved = services.access_request_approve(actor="admin", request=request, expires_at=shorter)

    assert approved.state == AccessRequestState.APPROVED
    assert approved.grant is not None
    assert approved.grant.expires_at == shorter
    assert AuditEvent.objects.filter(action="access_request.approved").exists()


def test_a_request_for_an_unapproved_tool_stays_pending_and_says_why(team, charlie):
    server = approved_server("files")
    tool = ToolFactory(server=server, name="delete_everything")
    request = services.access_request_create(
        actor=charlie, team=team, server=server, tool=tool, justification="cleanup"
    )

    with pytest.raises(ApplicationError, match="stays pending: The tool delete_everything"):
        services.access_request_approve(actor="admin", request=request)
    request.refresh_from_db()

    assert request.state == AccessRequestState.PENDING
    assert "not approved yet" in services.access_request_waiting_for(request)
    server_services.tool_approve(actor="test", tool=tool)
    assert services.access_request_approve(actor="admin", request=request).grant is not None


def test_a_denial_needs_a_reason(team, charlie):
    request = services.access_request_create(
        actor=charlie, team=team, server=approved_server("files"), justification="x"
    )

    with pytest.raises(ApplicationError, match="why"):
        services.access_request_deny(actor="admin", request=request, reason=" ")
    denied = services.access_request_deny(actor="admin", request=request, reason="not needed")

    assert (denied.state, denied.decision_reason) == (AccessRequestState.DENIED, "not needed")


def test_bulk_decisions_skip_what_cannot_be_decided_with_the_reason(team, charlie):
    server = approved_server("files", {"a": READ, "b": READ})
    pending_tool = ToolFactory(server=server, name="c")
    requests = [
        services.access_request_create(
            actor=charlie, team=team, server=server, tool=tool, justification="x"
        )
        for tool in (tool_of(server, "a"), tool_of(server, "b"), pending_tool)
    ]

    result = services.access_requests_decide_bulk(actor="admin", requests=requests, approve=True)

    assert len(result.done) == 2
    assert [(r.pk, "not approved yet" in why) for r, why in result.skipped] == [
        (requests[2].pk, True)
    ]


def test_a_request_needs_a_member_an_approved_server_and_no_access_yet(team, charlie, dave):
    server = approved_server("files")
    with pytest.raises(ApplicationError, match="members"):
        services.access_request_create(actor=dave, team=team, server=server, justification="x")
    draft = ToolFactory().server
    with pytest.raises(ApplicationError, match="approved servers"):
        services.access_request_create(actor=charlie, team=team, server=draft, justification="x")
    GrantFactory(team=team, server=server)
    with pytest.raises(ApplicationError, match="already has this access"):
        services.access_request_create(actor=charlie, team=team, server=server, justification="x")


# --- Agent tokens -------------------------------------------------------------------------------


def test_a_token_is_shown_once_and_stored_as_prefix_and_hash(team):
    created = services.agent_token_create(
        actor="test", team=team, role=team.roles.get(name="review"), name="bot"
    )

    match = TOKEN_RE.match(created.plain)
    assert match is not None
    assert created.token.prefix == match.group("prefix")
    assert created.token.secret_hash == hashlib.sha256(created.plain.encode()).hexdigest()
    assert len(match.group("secret")) == 43  # 32 random bytes


def test_last_use_reaches_the_row_at_most_once_a_minute(
    team, redis_cache, django_assert_num_queries, settings
):
    # The cache epoch's confirmation (one query, due every 30 s in the suite) falls on the token
    # check, not on a counted mark: its interval could run out between them on a loaded machine.
    settings.TOOLROOM_CACHE_REVALIDATE_SECONDS = 3600
    token = AgentTokenFactory(team=team)
    identity = token_authenticate(token.plain)

    with django_assert_num_queries(1):
        token_mark_used(identity, may_write_database=True)
    with django_assert_num_queries(0):
        token_mark_used(identity, may_write_database=True)
        token_mark_used(identity, may_write_database=False)

    token.refresh_from_db()
    assert token.last_used_at is not None


def test_token_names_are_unique_among_a_teams_usable_tokens(team):
    role = team.roles.get(name="review")
    first = services.agent_token_create(actor="test", team=team, role=role, name="bot")
    with pytest.raises(ApplicationError, match="already has an agent token"):
        services.agent_token_create(actor="test", team=team, role=role, name="bot")

    services.agent_token_revoke(actor="test", token=first.token)

    assert services.agent_token_create(actor="test", team=team, role=role, name="bot").plain


# --- Catalogue versions -------------------------------------------------------------------------


def test_the_cached_version_never_goes_backwards(team, redis_cache):
    current = catalogue_state(team_id=team.pk)

    _states_set_if_newer(
        catalogue_cache(), {team.pk: CatalogueState(version=current.version + 5, valid_until=None)}
    )
    _states_set_if_newer(
        catalogue_cache(), {team.pk: CatalogueState(version=current.version, valid_until=None)}
    )

    assert catalogue_state(team_id=team.pk).version == current.version + 5


def test_a_state_past_its_expiry_is_bumped_once(team, redis_cache):
    version = Team.objects.get(pk=team.pk).catalogue_version
    _states_set_if_newer(
        catalogue_cache(), {team.pk: CatalogueState(version=version, valid_until=1.0)}
    )

    state = catalogue_state(team_id=team.pk)

    assert state.version == version + 1
    assert state.valid_until is None
    assert catalogue_state(team_id=team.pk).version == version + 1
