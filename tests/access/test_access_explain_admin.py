"""The admin's answers from `access_explain`: who can use a tool (on its page), "why not?" for a
team and a tool by name, and what would still block an access request."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from registry.gateway import checks
from registry.servers import services as server_services
from registry.servers.models import ServerPrompt, ServerResource
from registry.teams import services as team_services
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import GrantFactory, McpServerFactory, TeamFactory, ToolFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def world(committed):
    checks._tables.clear()
    with committed():
        alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
        files = approved_server("files", {"read_file": READ, "write_file": WRITE})
        GrantFactory(team=alpha, server=files)
    return alpha, beta, files


def text(response):
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_tool_page_says_who_can_use_it_and_what_stops_the_others(client, alice, world):
    _, _, files = world
    client.force_login(alice)

    page = text(
        client.get(reverse("admin:servers_tool_change", args=[tool_of(files, "write_file").pk]))
    )

    assert "Who can use this (2 team role(s) can call it)" in page
    assert (
        "<td>alpha</td><td>review</td> <td>not available</td> <td><code>role_class</code>: "
        "The role &#x27;review&#x27; allows read tools; this is a write tool.</td>"
    ) in page
    assert "<td>alpha</td><td>operations</td> <td><strong>callable</strong></td>" in page
    assert (
        "<td>beta</td><td>operations</td> <td>not available</td> <td><code>grant</code>: "
        "The team holds no grant of this tool or of its server.</td>"
    ) in page


def test_the_team_page_answers_why_not_for_a_tool_by_name(client, alice, world, committed):
    alpha, _, files = world
    with committed():
        server_services.server_suspend(actor="test", server=files, reason="incident")
    client.force_login(alice)
    team_page = client.get(reverse("admin:teams_team_change", args=[alpha.pk]))
    url = reverse("admin:teams_team_why_not", args=[alpha.pk])
    assert url in team_page.content.decode()

    answer = client.get(url, {"tool": "files__read_file"})
    unknown = client.get(url, {"tool": "nope__nothing"})

    assert answer.status_code == 200
    explanations = answer.context["explanations"]
    assert [(e.role_name, e.first_failure.rule) for e in explanations] == [
        ("implementation", "server_review"),
        ("operations", "server_review"),
        ("review", "server_review"),
    ]
    assert "The server &#x27;files&#x27; is suspended." in answer.content.decode()
    assert "No tool is named &#x27;nope__nothing&#x27;." in unknown.content.decode()
    # Facts in words, not Python reprs; a tool picker that suggests the catalogue's names.
    content = answer.content.decode()
    assert "IsolationScope" not in content
    assert "GatewayMode" not in content
    assert "<dt>isolation scope</dt><dd>team</dd>" in content
    assert "<dt>current definition matches</dt><dd>yes</dd>" in content
    assert 'list="tool-names"' in content
    assert '<option value="files__read_file">' in content


def test_why_not_needs_admin_access(client, charlie, world):
    alpha, _, _ = world
    client.force_login(charlie)

    response = client.get(reverse("admin:teams_team_why_not", args=[alpha.pk]), {"tool": "x"})

    assert response.status_code == 302  # to the admin's login page
    assert "/login/" in response["Location"]


def test_an_access_request_shows_what_would_still_block_it(
    client, alice, charlie, world, committed
):
    _, beta, files = world
    with committed():
        team_services.team_member_set(actor="test", team=beta, user=charlie)
        drafted = McpServerFactory(slug="drafts")
        ToolFactory(server=drafted, name="draft_tool")
        server_services.server_submit_for_review(actor="test", server=drafted)
        pending_server = server_services.server_approve(actor="test", server=drafted)
        request = team_services.access_request_create(
            actor=charlie,
            team=beta,
            server=files,
            role=beta.roles.get(name="review"),
            justification="read the files",
        )
        waiting = team_services.access_request_create(
            actor=charlie,
            team=beta,
            server=pending_server,
            tool=tool_of(pending_server, "draft_tool"),
            justification="drafts",
        )
    client.force_login(alice)

    page = client.get(reverse("admin:teams_accessrequest_change", args=[request.pk]))
    other = client.get(reverse("admin:teams_accessrequest_change", args=[waiting.pk]))

    content = text(page)
    assert "If approved now: 1 of 2 role/tool pair(s) still blocked" in content
    assert (
        "<code>files__write_file</code></td> <td>not available</td> <td><code>role_class</code>"
        in content
    )
    assert "<code>files__read_file</code></td> <td><strong>callable</strong></td>" in content
    other_content = text(other)
    assert "If approved now: 3 of 3 role/tool pair(s) still blocked" in other_content
    assert "<code>tool_approval</code>: The tool is awaiting approval." in other_content


def test_a_decided_request_is_explained_as_things_stand(client, alice, charlie, world, committed):
    _, beta, files = world
    with committed():
        team_services.team_member_set(actor="test", team=beta, user=charlie)
        request = team_services.access_request_create(
            actor=charlie, team=beta, server=files, justification="read the files"
        )
        team_services.access_request_deny(actor="admin", request=request, reason="no")
    client.force_login(alice)

    content = text(client.get(reverse("admin:teams_accessrequest_change", args=[request.pk])))

    assert "Access it asked for, now: 6 of 6 role/tool pair(s) still blocked" in content
    assert "<code>grant</code>: The team holds no grant" in content


def test_an_admin_sees_and_resets_the_teams_private_data_marks_audited(client, alice, world):
    from registry.access import private_data
    from registry.audit.models import AuditEvent
    from registry.teams.tokens import token_authenticate
    from tests.factories import AgentTokenFactory

    alpha, _, _ = world
    marked = token_authenticate(AgentTokenFactory(team=alpha).plain)
    private_data.private_data_mark(caller=marked, server_slug="files", seconds=600)
    client.force_login(alice)
    url = reverse("admin:teams_team_ratchet", args=[alpha.pk])

    page = text(client.get(url))
    answer = client.post(url, {"reason": "reviewed the transcript"})

    assert f"team:{alpha.pk}:token:{marked.token_id}" in page
    assert answer.status_code == 302
    assert private_data.private_data_seen(marked) is None
    event = AuditEvent.objects.get(action="team.private_data_reset")
    assert event.actor_label == alice.username
    assert event.details["reason"] == "reviewed the transcript"
    assert list(event.before["marks"].values()) == ["files"]


def test_the_team_page_answers_why_not_for_a_resource_and_a_prompt(client, alice, world):
    alpha, _, files = world
    resource = ServerResource(server=files, uri="file:///readme", name="readme")
    prompt = ServerPrompt(server=files, name="review")
    for item in (resource, prompt):
        item.refresh_definition_hash()
        item.save()
    server_services.item_hide(actor="test", item=resource)
    client.force_login(alice)
    url = reverse("admin:teams_team_why_not", args=[alpha.pk])

    hidden = client.get(url, {"resource": "toolroom://files/file%3A%2F%2F%2Freadme"})
    pending = client.get(url, {"prompt": "files__review"})
    unknown = client.get(url, {"prompt": "nope__nothing"})

    assert [(e.kind, e.code) for e in hidden.context["explanations"]] == [
        ("resource", "unknown_tool")
    ] * 3
    assert "An admin hid the resource" in text(hidden).replace("&#x27;", "'")
    assert [e.first_failure.rule for e in pending.context["explanations"]] == ["tool_approval"] * 3
    assert "No prompt is named &#x27;nope__nothing&#x27;." in unknown.content.decode()
    # Pickers suggest the gateway's names of every resource and prompt.
    content = pending.content.decode()
    assert '<option value="toolroom://files/file%3A%2F%2F%2Freadme">' in content
    assert '<option value="files__review">' in content
