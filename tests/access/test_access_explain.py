"""`access_explain` rule by rule: for each rule, a registry where it alone fails gives that
reason, its facts, and the code the gateway's call check refuses with."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from registry.access import private_data, rules
from registry.access.explain import (
    RULE_APPROVAL,
    RULE_CIRCUIT,
    RULE_GATEWAY_MODE,
    RULE_GRANT,
    RULE_HEALTH,
    RULE_OFFERED,
    RULE_RATCHET,
    RULE_ROLE_CLASS,
    RULE_SERVER_REVIEW,
    access_explain,
    team_access_report,
    tool_access_overview,
)
from registry.gateway import checks
from registry.gateway.checks import call_check
from registry.gateway.services import server_circuit_trip, server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import Health, Tool
from registry.servers.vetting import tool_sync
from registry.teams import services as team_services
from registry.teams.models import Grant
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import CONNECT, READ, WRITE, approved_server, set_health, tool_of
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

TOOLS = {"read_file": READ, "write_file": WRITE, "fetch_url": CONNECT}


@pytest.fixture
def world(committed):
    """Team alpha with a grant of the whole 'files' server; nothing fails yet."""
    checks._tables.clear()
    with committed():
        team = TeamFactory(slug="alpha")
        server = approved_server("files", TOOLS)
        grant = GrantFactory(team=team, server=server)
    return team, server, grant


def explain(team, tool, role="operations", **kwargs):
    return access_explain(team=team, role=team.roles.get(name=role), tool=tool, **kwargs)


def call_code(team, tool, role="operations", token=None):
    with_role = team.roles.get(name=role)
    token = token or AgentTokenFactory(team=team, role=with_role)
    name = f"{tool.server.slug}__{tool.name}"
    return call_check(
        identity=token_authenticate(token.plain), name=name, arguments={"value": "x"}
    ).code


def failing(explanation):
    return [rule.rule for rule in explanation.rules if not rule.passed]


def test_everything_passes_and_the_facts_name_the_grant_and_the_approval(world):
    team, server, grant = world
    tool = tool_of(server, "read_file")

    explanation = explain(team, tool)

    assert explanation.callable
    assert explanation.in_catalogue
    assert explanation.code == rules.ALLOWED == call_code(team, tool)
    assert explanation.name == "files__read_file"
    grant_facts = explanation.rule(RULE_GRANT).facts
    assert [g["id"] for g in grant_facts["grants"]] == [grant.pk]
    assert grant_facts["grants"][0]["scope"] == "server"
    assert grant_facts["grants"][0]["granted_by"] == "factory"
    assert grant_facts["access_ends_at"] is None
    approval = explanation.rule(RULE_APPROVAL).facts
    assert approval["current_definition_matches"] is True
    assert approval["approval"]["approver"] == "test"
    assert approval["approval"]["definition_hash"] == tool.definition_hash
    assert explanation.rule(RULE_GATEWAY_MODE).facts["isolation_scope"] == "team"


def test_one_explanation_costs_a_constant_number_of_queries(
    world, committed, django_assert_num_queries
):
    team, server, _ = world
    with committed():
        for n in range(5):
            GrantFactory(team=team, server=server, role=team.roles.get(name="review"), note=str(n))
            team_services.grant_revoke(actor="test", grant=team.grants.latest("pk"), reason="x")
    role = team.roles.get(name="operations")
    tool = tool_of(server, "read_file")

    # tool with server and status, its approvals, the gateway policy, grants, access requests
    with django_assert_num_queries(5):
        access_explain(team=team, role=role, tool=tool)


def test_a_role_of_another_team_is_refused(world, committed):
    team, server, _ = world
    with committed():
        other = TeamFactory(slug="beta")

    with pytest.raises(ValueError, match="not one of the team's roles"):
        access_explain(
            team=team, role=other.roles.get(name="review"), tool=tool_of(server, "read_file")
        )


def test_no_grant_alone_fails_the_grant_rule(world, committed):
    _, server, _ = world
    with committed():
        other = TeamFactory(slug="beta")
    tool = tool_of(server, "read_file")

    explanation = explain(other, tool)

    assert failing(explanation) == [RULE_GRANT]
    assert explanation.first_failure.reason == (
        "The team holds no grant of this tool or of its server."
    )
    assert explanation.code == rules.UNKNOWN_TOOL == call_code(other, tool)


def test_a_grant_for_another_role_or_an_expired_one_is_named(world, committed):
    team, server, grant = world
    tool = tool_of(server, "read_file")
    with committed():
        team_services.grant_revoke(actor="test", grant=grant, reason="moved")
        GrantFactory(team=team, server=server, tool=tool, role=team.roles.get(name="review"))

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_GRANT]
    assert explanation.first_failure.reason == (
        "The team's grant covers the role(s) review only, not 'operations'."
    )
    facts = explanation.first_failure.facts
    assert facts["ended_grants"][0]["state"] == "revoked"
    assert facts["ended_grants"][0]["revoke_reason"] == "moved"
    assert explain(team, tool, role="review").callable

    Grant.objects.filter(team=team, tool=tool).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    expired = explain(team, tool, role="review")
    assert expired.first_failure.reason == "The team's grant has expired."


def test_a_grant_from_an_access_request_names_the_request(world, committed):
    team, server, grant = world
    user = UserFactory(username="erin")
    tool = tool_of(server, "write_file")
    with committed():
        team_services.grant_revoke(actor="test", grant=grant, reason="asked per tool now")
        team_services.team_member_set(actor="test", team=team, user=user, level="owner")
        request = team_services.access_request_create(
            actor=user,
            team=team,
            server=server,
            tool=tool,
            role=team.roles.get(name="implementation"),
            justification="We write reports.",
        )
        team_services.access_request_approve(actor="admin", request=request)

    explanation = explain(team, tool, role="implementation")

    assert explanation.callable
    [granted] = explanation.rule(RULE_GRANT).facts["grants"]
    assert granted["scope"] == "tool"
    assert granted["role"] == "implementation"
    assert granted["access_request"]["id"] == request.pk
    assert granted["access_request"]["justification"] == "We write reports."
    assert granted["access_request"]["decided_by"] == "admin"


def test_a_tool_the_server_no_longer_offers_alone_fails_offered(world):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    # Only the removal itself (discovery would also end the approval: see the next assertion).
    Tool.objects.filter(pk=tool.pk).update(removed_at=timezone.now())
    checks._tables.clear()

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_OFFERED]
    assert explanation.code == rules.UNKNOWN_TOOL == call_code(team, tool)


def test_a_suspended_server_alone_fails_the_review_rule(world, committed):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        server_services.server_suspend(actor="test", server=server, reason="incident 42")

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_SERVER_REVIEW]
    assert explanation.first_failure.reason == "The server 'files' is suspended."
    assert explanation.first_failure.facts["review_status"] == "suspended"
    assert explanation.code == rules.SERVER_UNAVAILABLE == call_code(team, tool)


def test_a_rug_pull_alone_fails_the_approval_rule_it_is_not_the_tool_we_approved(world, committed):
    team, server, _ = world
    approved_hash = tool_of(server, "read_file").definition_hash
    definitions = [
        tool_sync_definition(name, hints, worse=name == "read_file")
        for name, hints in TOOLS.items()
    ]
    with committed():
        tool_sync.server_tools_sync(server=server, tools=definitions)
    tool = tool_of(server, "read_file")

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_APPROVAL]
    facts = explanation.first_failure.facts
    assert facts["current_definition_matches"] is False
    assert facts["approval"]["definition_hash"] == approved_hash
    assert facts["approval"]["active"] is False
    assert facts["approval"]["end_reason"] == "definition_changed"
    assert "not the tool that was approved" in explanation.first_failure.reason
    # The reason names the hash that was approved (the tool's pinned one is cleared).
    assert facts["last_approved_definition_hash"] == approved_hash
    assert (
        f"({approved_hash[:12]} approved, {tool.definition_hash[:12]} now)"
        in explanation.first_failure.reason
    )
    assert explanation.code == rules.DEFINITION_CHANGED == call_code(team, tool)


def test_a_revoked_approval_alone_fails_the_approval_rule(world, committed):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        server_services.tool_revoke(actor="test", tool=tool, reason="leaks paths")

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_APPROVAL]
    assert explanation.code == rules.TOOL_NOT_APPROVED == call_code(team, tool)


def test_findings_acknowledged_by_the_approver_are_counted(world, committed):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    finding = {"rule": "hidden-instructions", "severity": "high", "location": "description"}
    Tool.objects.filter(pk=tool.pk).update(findings=[finding])
    tool.refresh_from_db()
    with committed():
        server_services.tool_revoke(actor="test", tool=tool, reason="re-review")
        server_services.tool_approve(
            actor="test", tool=tool, note="Seen, harmless.", acknowledge_findings=True
        )

    approval = explain(team, tool).rule(RULE_APPROVAL).facts["approval"]

    assert approval["note"] == "Seen, harmless."
    assert approval["findings_acknowledged"] == 1


def test_a_role_without_the_class_alone_fails_and_an_admin_override_is_shown(world, committed):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        server_services.tool_set_permission_class(actor="test", tool=tool, permission_class="write")
    tool.refresh_from_db()

    explanation = explain(team, tool, role="review")

    assert failing(explanation) == [RULE_ROLE_CLASS]
    assert explanation.first_failure.reason == (
        "The role 'review' allows read tools; this is a write tool (set by an admin)."
    )
    facts = explanation.first_failure.facts
    assert (facts["derived_class"], facts["admin_override"]) == ("read", "write")
    assert explanation.code == rules.ROLE_FORBIDS == call_code(team, tool, role="review")


def test_an_unhealthy_server_alone_fails_health_only_when_hidden(world, committed, settings):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        set_health(server, Health.UNHEALTHY)

    flagged = explain(team, tool)
    assert flagged.callable
    assert "flagged unhealthy" in flagged.rule(RULE_HEALTH).reason

    settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = True
    checks._tables.clear()
    hidden = explain(team, tool)
    assert failing(hidden) == [RULE_HEALTH]
    assert hidden.code == rules.SERVER_UNHEALTHY == call_code(team, tool)


def test_a_server_not_callable_through_the_gateway_is_in_the_catalogue_but_refused(
    world, committed
):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        server_gateway_policy_set(actor="test", server=server, mode="not_callable")

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_GATEWAY_MODE]
    assert explanation.in_catalogue
    assert not explanation.callable
    assert explanation.verdict == "in catalogue, refused at call time"
    assert explanation.code == rules.NOT_CALLABLE == call_code(team, tool)


def test_an_open_circuit_alone_fails_the_circuit_rule(world, committed):
    team, server, _ = world
    tool = tool_of(server, "read_file")
    with committed():
        assert server_circuit_trip(server_id=server.pk, error="connection refused")

    explanation = explain(team, tool)

    assert failing(explanation) == [RULE_CIRCUIT]
    assert explanation.code == rules.CIRCUIT_OPEN == call_code(team, tool)


def test_the_ratchet_alone_fails_for_a_token_that_read_private_data(world):
    team, server, _ = world
    tool = tool_of(server, "fetch_url")
    token, other = AgentTokenFactory(team=team), AgentTokenFactory(team=team)
    marked = token_authenticate(token.plain)
    private_data.private_data_mark(caller=marked, server_slug="vault", seconds=600)

    explanation = explain(team, tool, caller=marked)

    assert failing(explanation) == [RULE_RATCHET]
    assert explanation.first_failure.facts["private_data_read_from"] == "vault"
    assert explanation.code == rules.PRIVATE_DATA_RATCHET
    assert call_code(team, tool, token=token) == rules.PRIVATE_DATA_RATCHET
    assert explain(team, tool, caller=token_authenticate(other.plain)).callable
    assert explain(team, tool_of(server, "read_file"), caller=marked).callable


def test_who_can_use_a_tool_lists_every_team_and_role(world, committed, django_assert_num_queries):
    _, server, _ = world
    with committed():
        TeamFactory(slug="beta")
    tool = tool_of(server, "write_file")

    with django_assert_num_queries(6):
        overview = tool_access_overview(tool=tool)

    verdicts = {(e.team_slug, e.role_name): (e.callable, e.code) for e in overview}
    assert verdicts == {
        ("alpha", "implementation"): (True, "allowed"),
        ("alpha", "operations"): (True, "allowed"),
        ("alpha", "review"): (False, "role_forbids"),
        ("beta", "implementation"): (False, "unknown_tool"),
        ("beta", "operations"): (False, "unknown_tool"),
        ("beta", "review"): (False, "unknown_tool"),
    }


def test_the_team_report_lists_what_each_role_can_use(world):
    team, _, _ = world

    report = team_access_report(team=team)

    assert sorted((e.role_name, e.name) for e in report) == [
        ("implementation", "files__read_file"),
        ("implementation", "files__write_file"),
        ("operations", "files__fetch_url"),
        ("operations", "files__read_file"),
        ("operations", "files__write_file"),
        ("review", "files__read_file"),
    ]


def tool_sync_definition(name, hints, *, worse=False):
    from tests.factories import tool_definition

    if worse:
        return tool_definition(name, annotations=hints, description="Now worse.")
    return tool_definition(name, annotations=hints)
