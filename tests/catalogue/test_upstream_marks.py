"""The catalogue's "needs your account" mark (issue 25): a per-person server's tool says, for the
calling person, whether they linked their account (or entered their secret) and where to do it,
in the REST catalogue's native and MCP formats (a field), its OpenAI and Anthropic formats (a line
of the description the model reads), the gateway's tools/list and the portal; an agent token
reads that it cannot call such a tool. The fragment-built documents stay byte for byte the
reference renderers' for every kind of caller."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django.test import Client as HttpClient
from django.utils import timezone

from registry.catalogue.formats import render_tools
from registry.catalogue.fragments import FragmentStore, tools_document_body
from registry.catalogue.selectors import catalogue_for_agent
from registry.gateway.listing import tools_list_document
from registry.oauth.tokens import person_token_authenticate
from registry.teams.tokens import token_authenticate
from registry.upstream.services import secret_store
from tests.catalogue_helpers import per_person_servers
from tests.factories import AgentTokenFactory
from tests.oauth_helpers import person_access_token

pytestmark = pytest.mark.django_db

PAGE = "http://127.0.0.1:8000/portal/accounts/"


@pytest.fixture
def world(committed) -> dict[str, Any]:
    with committed():
        return per_person_servers()


def marks(document: dict[str, Any], fmt: str) -> dict[str, Any]:
    """Each tool's mark (None: none), by tool name."""
    if fmt == "native":
        return {tool["name"]: tool.get("upstreamAccount") for tool in document["tools"]}
    return {
        tool["name"]: tool["_meta"]["toolroom/catalogue"].get("upstreamAccount")
        for tool in document["tools"]
    }


def test_the_fragments_match_the_reference_for_agents_and_people(world, committed):
    team = world["team"]
    role = team.roles.get(name="operations")
    agent = token_authenticate(AgentTokenFactory(team=team).plain)
    with committed():
        token = person_access_token(world["carol"], team)
    person = person_token_authenticate(token).identity
    linked = dataclasses.replace(person, upstream_accounts={"keyed": "linked", "tracker": "broken"})
    expected = [
        (agent, "needs_person", "needs_person"),
        (person, "not_linked", "not_linked"),
        (linked, "linked", "broken"),
    ]
    at = timezone.now()
    for caller, keyed, tracker in expected:
        for fmt in ("native", "mcp"):
            catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk, at=at)
            reference = json.dumps(
                render_tools(fmt, catalogue, version=7, preflight=None, caller=caller),
                ensure_ascii=False,
                separators=(",", ":"),
            ).encode()
            built = tools_document_body(
                fmt=fmt,
                team_id=team.pk,
                role_id=role.pk,
                version=7,
                at=at,
                store=FragmentStore(),
                caller=caller,
            )
            assert built == reference
            assert marks(json.loads(built), fmt) == {
                "files__whoami": None,
                "keyed__whoami": {"mode": "person_secret", "state": keyed, "url": PAGE},
                "tracker__whoami": {"mode": "person_oauth", "state": tracker, "url": PAGE},
            }


def test_the_api_and_the_gateway_mark_a_persons_tools_as_their_accounts_change(
    world, committed, api_client
):
    with committed():
        token = person_access_token(world["carol"], world["team"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    before = api_client.get("/api/v1/catalogue")
    assert before.status_code == 200, before.content
    assert marks(before.json(), "native")["keyed__whoami"] == {
        "mode": "person_secret",
        "state": "not_linked",
        "url": PAGE,
    }
    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    after = api_client.get("/api/v1/catalogue", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200  # not 304: the mark changed
    assert marks(after.json(), "native")["keyed__whoami"]["state"] == "linked"
    assert marks(after.json(), "native")["tracker__whoami"]["state"] == "not_linked"
    listed = api_client.get("/api/v1/catalogue", {"format": "mcp"}).json()
    assert marks(listed, "mcp")["keyed__whoami"]["state"] == "linked"
    # The gateway's own tools/list says the same.
    identity = person_token_authenticate(token).identity
    gateway_list = json.loads(tools_list_document(identity=identity).body)
    assert marks(gateway_list, "mcp")["keyed__whoami"]["state"] == "linked"
    assert marks(gateway_list, "mcp")["files__whoami"] is None
    # An agent token reads that it cannot call them.
    api_client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {AgentTokenFactory(team=world['team']).plain}"
    )
    agent = marks(api_client.get("/api/v1/catalogue").json(), "native")
    assert agent["keyed__whoami"]["state"] == agent["tracker__whoami"]["state"] == "needs_person"


def test_the_portal_marks_the_tools_that_need_the_persons_account(world, committed):
    http = HttpClient()
    http.force_login(world["carol"])
    roles = world["team"].roles.count()  # a table per role, each with the three tools
    page = http.get("/portal/").content.decode()
    assert page.count("Needs your account") == 2 * roles
    assert 'href="/portal/accounts/">enter your token</a>' in page
    assert 'href="/portal/accounts/">link it</a>' in page
    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    page = http.get("/portal/").content.decode()
    assert page.count("Needs your account") == roles
    assert "(uses your own account)" in page


# The sentence ending a per-person tool's description in the OpenAI and Anthropic formats.
NOTES = {
    ("person_secret", "not_linked"): (
        f"Needs your account: enter your token or API key at {PAGE}, then call it."
    ),
    ("person_oauth", "not_linked"): f"Needs your account: link it at {PAGE}, then call it.",
    ("person_secret", "linked"): "Acts with your own account there (linked).",
    ("person_oauth", "broken"): f"Your account there is broken: re-link it at {PAGE}.",
    ("person_secret", "needs_person"): (
        "Needs a person's own account: an agent token cannot call it (call it from a person's "
        "MCP client signed in to Toolroom)."
    ),
}
NOTES[("person_oauth", "needs_person")] = NOTES[("person_secret", "needs_person")]


def descriptions(document: dict[str, Any], fmt: str) -> dict[str, str]:
    """Each tool's description, by tool name (OpenAI or Anthropic)."""
    entries = [tool["function"] if fmt == "openai" else tool for tool in document["tools"]]
    return {entry["name"]: entry["description"] for entry in entries}


def test_openai_and_anthropic_descriptions_end_with_the_callers_mark(world, committed):
    """The function-calling formats take no field of Toolroom's in a tool: the mark is a line of
    the description, the caller's own; fragments kept in one store for every caller never hand
    one caller's sentence to another."""
    team = world["team"]
    role = team.roles.get(name="operations")
    agent = token_authenticate(AgentTokenFactory(team=team).plain)
    with committed():
        token = person_access_token(world["carol"], team)
    person = person_token_authenticate(token).identity
    linked = dataclasses.replace(person, upstream_accounts={"keyed": "linked", "tracker": "broken"})
    expected = [
        (agent, "needs_person", "needs_person"),
        (person, "not_linked", "not_linked"),
        (linked, "linked", "broken"),
        (person, "not_linked", "not_linked"),  # again, from the kept fragments
    ]
    at = timezone.now()
    store = FragmentStore()
    for caller, keyed, tracker in expected:
        for fmt in ("openai", "anthropic"):
            catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk, at=at)
            reference = json.dumps(
                render_tools(fmt, catalogue, version=7, preflight=None, caller=caller),
                ensure_ascii=False,
                separators=(",", ":"),
            ).encode()
            built = tools_document_body(
                fmt=fmt,
                team_id=team.pk,
                role_id=role.pk,
                version=7,
                at=at,
                store=store,
                caller=caller,
            )
            assert built == reference
            found = descriptions(json.loads(built), fmt)
            plain = catalogue.tools[0].description
            assert found == {
                "files__whoami": plain,
                "keyed__whoami": f"{plain}\n\n{NOTES[('person_secret', keyed)]}",
                "tracker__whoami": f"{plain}\n\n{NOTES[('person_oauth', tracker)]}",
            }


def test_the_api_marks_openai_and_anthropic_tools_as_the_accounts_change(
    world, committed, api_client
):
    with committed():
        token = person_access_token(world["carol"], world["team"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    before = api_client.get("/api/v1/catalogue", {"format": "openai"})
    assert before.status_code == 200, before.content
    assert descriptions(before.json(), "openai")["keyed__whoami"].endswith(
        NOTES[("person_secret", "not_linked")]
    )
    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    after = api_client.get(
        "/api/v1/catalogue", {"format": "openai"}, HTTP_IF_NONE_MATCH=before["ETag"]
    )
    assert after.status_code == 200  # not 304: the mark changed
    assert descriptions(after.json(), "openai")["keyed__whoami"].endswith(
        NOTES[("person_secret", "linked")]
    )
    persons = api_client.get("/api/v1/catalogue", {"format": "anthropic"})
    anthropic = descriptions(persons.json(), "anthropic")
    assert anthropic["keyed__whoami"].endswith(NOTES[("person_secret", "linked")])
    assert anthropic["tracker__whoami"].endswith(NOTES[("person_oauth", "not_linked")])
    assert "\n\n" not in anthropic["files__whoami"]
    # An agent token's model reads that it cannot call them; the person's document is not its.
    api_client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {AgentTokenFactory(team=world['team']).plain}"
    )
    agent = api_client.get("/api/v1/catalogue", {"format": "anthropic"})
    assert agent["ETag"] != persons["ETag"]
    for name in ("keyed__whoami", "tracker__whoami"):
        assert descriptions(agent.json(), "anthropic")[name].endswith(
            NOTES[("person_oauth", "needs_person")]
        )
