"""A concrete URI expanded from a resource template is explained as the template the gateway reads
it through (`item_for_agent_name`, `item_by_name`, `expansion_of`): the oldest of its server's
templates it is an expansion of (RFC 6570), an exact resource first, hidden templates skipped; and
the gateway (`agent_content`, `resource_lookup`) answers the read with the explanation's code."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from registry.access.explain_items import (
    expansion_of,
    item_by_name,
    item_explain,
    item_for_agent_name,
)
from registry.access.rules import ALLOWED, TOOL_NOT_APPROVED
from registry.core.process_cache import forget_all
from registry.gateway.content import agent_content, content_refusal, resource_lookup
from registry.servers import services as server_services
from registry.servers.models import ServerResource
from registry.teams import services as team_services
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db]

NOTE_42 = "toolroom://notes/memo%3A%2F%2Fnotes%2F42"


@pytest.fixture
def world(settings):
    """alpha holds the whole 'notes' server: an approved template `memo://notes/{id}`; beta
    holds nothing."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    cache.clear()
    forget_all()
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    server = approved_server("notes", {"look": READ})
    GrantFactory(team=alpha, server=server)
    template = resource_of(server, "memo://notes/{id}", template=True)
    return alpha, beta, server, template


def resource_of(server, uri, *, template=False, approve=True, hide=False):
    """A resource (or template) as discovery stores it, approved, awaiting approval or hidden."""
    item = ServerResource(server=server, uri=uri, name="note", is_template=template)
    item.refresh_definition_hash()
    item.save()
    if hide:
        return server_services.item_hide(actor="test", item=item)
    return server_services.item_approve(actor="test", item=item) if approve else item


def gateway_code(team, name):
    """What the gateway answers an agent of the team's first role reading `name`."""
    role = team.roles.order_by("name").first()
    token = team_services.agent_token_create(actor="test", team=team, role=role, name="agent")
    identity = token_authenticate(token.plain)
    entry = resource_lookup(agent_content(identity=identity), name)
    if entry is None:
        return "unknown_tool"
    refusal = content_refusal(entry, identity=identity)
    return refusal.code if refusal else ALLOWED


def test_a_concrete_uri_is_explained_as_the_template_it_is_read_through(world):
    alpha, _, _, template = world
    role = alpha.roles.order_by("name").first()

    found = item_for_agent_name(team=alpha, kind="resource", name=NOTE_42)

    assert found == template
    assert expansion_of(found, NOTE_42) == NOTE_42
    assert expansion_of(found, "toolroom://notes/memo%3A%2F%2Fnotes%2F{id}") == ""
    explanation = item_explain(team=alpha, role=role, item=found, expanded_uri=NOTE_42)
    assert explanation.name == "toolroom://notes/memo%3A%2F%2Fnotes%2F{id}"
    assert (explanation.code, explanation.as_dict()["expanded_uri"]) == (ALLOWED, NOTE_42)
    assert gateway_code(alpha, NOTE_42) == ALLOWED
    assert "expanded_uri" not in item_explain(team=alpha, role=role, item=found).as_dict()


@pytest.mark.parametrize(
    "uri",
    [
        "toolroom://notes/memo%3A%2F%2Fnotes%2F4%2F2",  # {id} never spans a /
        "toolroom://notes/memo%3A%2F%2Fnotes%2F..",  # a dot-segment the template has not
        "toolroom://notes/memo%3A%2F%2Fnotes%2F%2e%2e",
        "toolroom://notes/memo%3A%2F%2Fother%2F42",
        "toolroom://elsewhere/memo%3A%2F%2Fnotes%2F42",  # another server's URI
        "memo://notes/42",  # not the gateway's scheme
    ],
)
def test_a_uri_that_is_no_expansion_is_not_matched(world, uri):
    alpha = world[0]
    assert item_for_agent_name(team=alpha, kind="resource", name=uri) is None
    assert item_by_name(kind="resource", name=uri) is None
    assert gateway_code(alpha, uri) == "unknown_tool"


def test_a_resource_of_that_uri_comes_before_the_template(world):
    alpha, _, server, _ = world
    exact = resource_of(server, "memo://notes/42")
    assert item_for_agent_name(team=alpha, kind="resource", name=NOTE_42) == exact
    assert expansion_of(exact, NOTE_42) == ""


def test_the_older_of_two_matching_templates_decides_as_at_the_gateway(world):
    """An older template awaiting approval matches first: the read is refused, and the
    explanation names that template and why."""
    alpha, _, server, approved = world
    approved.delete()
    pending = resource_of(server, "memo://{section}/{id}", template=True, approve=False)
    resource_of(server, "memo://notes/{id}", template=True)
    role = alpha.roles.order_by("name").first()

    found = item_for_agent_name(team=alpha, kind="resource", name=NOTE_42)

    assert found == pending
    explanation = item_explain(team=alpha, role=role, item=found, expanded_uri=NOTE_42)
    assert explanation.code == TOOL_NOT_APPROVED == gateway_code(alpha, NOTE_42)
    assert "awaiting approval" in explanation.first_failure.reason


def test_a_hidden_template_is_skipped_for_teams_and_named_to_admins(world):
    alpha, _, _, template = world
    server_services.item_hide(actor="test", item=template)

    assert item_for_agent_name(team=alpha, kind="resource", name=NOTE_42) is None
    assert gateway_code(alpha, NOTE_42) == "unknown_tool"
    assert item_by_name(kind="resource", name=NOTE_42) == template


def test_a_team_without_the_server_may_ask_about_an_approved_servers_template(world):
    """beta may browse the approved server: the explanation names the missing grant, the code
    the gateway answers (it does not know the URI)."""
    _, beta, _, template = world
    role = beta.roles.order_by("name").first()
    found = item_for_agent_name(team=beta, kind="resource", name=NOTE_42)
    assert found == template
    explanation = item_explain(team=beta, role=role, item=found, expanded_uri=NOTE_42)
    assert (explanation.first_failure.rule, explanation.code) == ("grant", "unknown_tool")
    assert gateway_code(beta, NOTE_42) == "unknown_tool"
