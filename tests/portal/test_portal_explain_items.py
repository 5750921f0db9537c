"""The portal's "Why (not)?" for a resource (by the gateway's URI, or a URI expanded from a
template) and a prompt, through Django's test client: the same `item_explain` as the API and the
admin, for the member's own teams only; what the team may not ask about reads like a name that
does not exist, and another team's page is 404."""

from __future__ import annotations

import re

import pytest

from registry.servers import services as server_services
from registry.servers.models import ServerPrompt, ServerResource
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

README = "toolroom://files/file%3A%2F%2F%2Freadme"
NOTES = "toolroom://files/file%3A%2F%2F%2Fnotes%2F{id}"
NOTE_7 = "toolroom://files/file%3A%2F%2F%2Fnotes%2F7"
PLAN = "toolroom://beta-private/plan%3A%2F%2Fq3"


@pytest.fixture
def world(charlie, dave, committed):
    """dave is a member of alpha, which holds the whole 'files' server (an approved resource
    and template, a prompt awaiting approval); erin's beta holds a suspended server of its own."""
    erin = UserFactory(username="erin")
    with committed():
        alpha = TeamFactory(slug="alpha", name="Alpha")
        beta = TeamFactory(slug="beta", name="Beta")
        services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
        services.team_member_set(actor="test", team=alpha, user=dave)
        services.team_member_set(actor="test", team=beta, user=erin)
        files = approved_server("files", {"read_file": READ})
        GrantFactory(team=alpha, server=files)
        item_of(files, uri="file:///readme")
        item_of(files, uri="file:///notes/{id}", template=True)
        item_of(files, prompt="review", approve=False)
        private = approved_server("beta-private", {"plan": READ})
        item_of(private, uri="plan://q3")
        item_of(private, prompt="leak")
        server_services.server_suspend(actor="test", server=private, reason="only for beta")
        GrantFactory(team=beta, server=private)
    return alpha, beta


def item_of(server, *, uri=None, prompt=None, template=False, approve=True):
    item: ServerResource | ServerPrompt = (
        ServerResource(server=server, uri=uri, name="item", is_template=template)
        if uri is not None
        else ServerPrompt(server=server, name=prompt)
    )
    item.refresh_definition_hash()
    item.save()
    return server_services.item_approve(actor="test", item=item) if approve else item


def explain(client, **query):
    return client.get("/portal/teams/alpha/explain/", query)


def test_a_resource_is_explained_for_each_role_with_the_reason(client, world, dave):
    alpha, _ = world
    client.force_login(dave)

    page = explain(client, resource=README)

    assert page.status_code == 200
    explanations = page.context["explanations"]
    assert [e.role_name for e in explanations] == sorted(r.name for r in alpha.roles.all())
    assert {e.kind for e in explanations} == {"resource"}
    body = page.content.decode()
    operations = next(e for e in explanations if e.role_name == "operations")
    assert operations.callable
    assert "Role operations: callable" in body
    assert "The current definition" in body  # the approval rule's reason, in words
    assert f'name="resource" value="{README}"' in body
    assert 'name="tool" value=""' in body
    for label in ("Explain tool", "Explain resource", "Explain prompt"):
        assert f">{label}</button>" in body


def test_a_prompt_awaiting_approval_is_refused_with_the_reason(client, world, dave):
    client.force_login(dave)

    page = explain(client, prompt="files__review")

    operations = next(e for e in page.context["explanations"] if e.role_name == "operations")
    assert (operations.callable, operations.first_failure.rule) == (False, "tool_approval")
    body = page.content.decode()
    assert "Role operations: not available" in body
    assert "The prompt is awaiting approval: an admin approves each resource and prompt." in body
    assert "<strong>fails</strong>" in body


def test_a_uri_expanded_from_a_template_is_explained_as_the_template(client, world, dave):
    client.force_login(dave)

    page = explain(client, resource=NOTE_7)

    explanations = page.context["explanations"]
    assert {(e.name, e.expanded_uri) for e in explanations} == {(NOTES, NOTE_7)}
    assert (
        f"<code>{NOTE_7}</code> is read through the resource template <code>{NOTES}</code>"
        in page.content.decode()
    )


def test_the_pickers_offer_what_the_team_may_ask_about(client, world, dave):
    client.force_login(dave)
    body = explain(client).content.decode()

    options = re.findall(r'<option value="([^"]+)">', body)
    assert {README, NOTES, "files__review"} <= set(options)
    assert PLAN not in options
    assert "beta-private__leak" not in options
    assert 'list="resource-names"' in body
    assert 'list="prompt-names"' in body


def test_what_the_team_may_not_ask_about_reads_like_nothing(client, world, dave):
    client.force_login(dave)

    other_teams = explain(client, resource=PLAN)
    unknown = explain(client, resource="toolroom://files/file%3A%2F%2F%2Fnone")
    other_prompt = explain(client, prompt="beta-private__leak")
    unknown_prompt = explain(client, prompt="nothing__here")

    for answer in (other_teams, unknown, other_prompt, unknown_prompt):
        assert answer.status_code == 200
        assert answer.context["explanations"] == []
    assert other_teams.context["error"] == f"No resource you may ask about is named '{PLAN}'."
    assert other_prompt.context["error"].replace("beta-private__leak", "X") == (
        unknown_prompt.context["error"].replace("nothing__here", "X")
    )
    assert 'aria-invalid="true" aria-describedby="id_prompt_error"' in other_prompt.content.decode()


def test_another_teams_page_is_404_for_resources_and_prompts(client, world, dave):
    client.force_login(dave)

    for query in ({"resource": PLAN}, {"prompt": "beta-private__leak"}, {"resource": README}):
        answer = client.get("/portal/teams/beta/explain/", query)
        assert answer.status_code == 404
        assert "explanations" not in answer.context
