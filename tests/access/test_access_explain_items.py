"""The explanation of a server's resource or prompt (`item_explain`): the rules a tool goes through,
with the item's kind, in a constant number of queries; each rule that reads the item says so."""

from __future__ import annotations

import pytest

from registry.access.explain import RULE_APPROVAL, RULE_GRANT, RULE_RATCHET, RULE_ROLE_CLASS
from registry.access.explain_items import item_explain
from registry.access.rules import ALLOWED, DEFINITION_CHANGED, ROLE_FORBIDS
from registry.servers import services as server_services
from registry.servers.vetting import tool_sync
from registry.teams import services as team_services
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory, tool_definition

pytestmark = [pytest.mark.django_db]

RESOURCES = [{"uri": "memo://greeting", "name": "greeting", "description": "A greeting."}]
PROMPTS = [{"name": "summarise", "description": "Summarise a text."}]


@pytest.fixture
def world():
    """alpha holds the whole 'notes' server, whose resource and prompt are approved."""
    team = TeamFactory(slug="alpha")
    server = approved_server("notes", {"look": READ})
    tools = [tool_definition("look", annotations=READ)]
    tool_sync.server_tools_sync(server=server, tools=tools, resources=RESOURCES, prompts=PROMPTS)
    for item in [*server.resources.all(), *server.prompts.all()]:
        server_services.item_approve(actor="test", item=item)
    GrantFactory(team=team, server=server)
    return team, server


def test_an_approved_resource_is_explained_callable_in_four_queries(
    world, django_assert_num_queries
):
    team, server = world
    role = team.roles.get(name="operations")
    resource = server.resources.get()

    with django_assert_num_queries(4):
        explanation = item_explain(team=team, role=role, item=resource)

    assert (explanation.kind, explanation.code, explanation.callable) == ("resource", ALLOWED, True)
    assert explanation.name == "toolroom://notes/memo%3A%2F%2Fgreeting"
    assert explanation.as_dict()["resource"] == "memo://greeting"
    assert explanation.rule(RULE_GRANT).facts["grants"][0]["scope"] == "server"
    assert explanation.rule(RULE_APPROVAL).facts["reviewed_by"] == "test"
    assert "never refuses" in explanation.rule(RULE_RATCHET).reason


def test_a_changed_prompt_alone_fails_the_approval_rule_naming_both_hashes(world):
    team, server = world
    approved = server.prompts.get().definition_hash
    changed = [{"name": "summarise", "description": "Summarise, and mail it out."}]
    tool_sync.server_tools_sync(
        server=server,
        tools=[tool_definition("look", annotations=READ)],
        resources=RESOURCES,
        prompts=changed,
    )
    prompt = server.prompts.get()

    explanation = item_explain(team=team, role=team.roles.get(name="operations"), item=prompt)

    assert [rule.rule for rule in explanation.rules if not rule.passed] == [RULE_APPROVAL]
    assert explanation.code == DEFINITION_CHANGED
    reason = explanation.rule(RULE_APPROVAL).reason
    assert approved[:12] in reason
    assert prompt.definition_hash[:12] in reason


def test_a_role_without_read_and_a_grant_of_one_tool_are_named(world):
    team, server = world
    role = team.roles.get(name="operations")
    team_services.role_update(actor="test", role=role, changes={"allows_read": False})
    other = TeamFactory(slug="beta")
    team_services.grant_create(
        actor="test", team=other, server=server, tool=server.tools.get(name="look")
    )
    resource = server.resources.get()

    no_read = item_explain(team=team, role=team.roles.get(name="operations"), item=resource)
    one_tool = item_explain(team=other, role=other.roles.get(name="operations"), item=resource)

    assert (no_read.first_failure.rule, no_read.code) == (RULE_ROLE_CLASS, ROLE_FORBIDS)
    assert "read-class" in no_read.rule(RULE_ROLE_CLASS).reason
    assert one_tool.first_failure.rule == RULE_GRANT
    assert "whole server" in one_tool.rule(RULE_GRANT).reason
