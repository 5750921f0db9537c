"""Search results carry the "needs your account" mark of a per-person tool (issue 25) as the whole
catalogue does: `GET /api/v1/catalogue?q=` in every format (a field in the native and MCP
answers, a line of the description in the OpenAI and Anthropic ones), each caller its own (a
search answer is kept per caller's accounts, and its encoded entries per mark), and the
gateway's search mode (`find_tools` and the pinned tools of its tools/list)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from registry.catalogue.formats import TOOL_FORMATS, render_tools
from registry.catalogue.search import SearchRequest, catalogue_search, search_document
from registry.catalogue.versions import catalogue_state
from registry.core.process_cache import forget_all
from registry.gateway import search_mode
from registry.oauth.tokens import person_token_authenticate
from registry.search.index import tool_search_index_refresh
from registry.teams.callers import Caller
from registry.teams.tokens import token_authenticate
from registry.upstream.services import secret_store
from tests.catalogue.test_upstream_marks import NOTES, PAGE, descriptions, marks
from tests.catalogue_helpers import per_person_servers
from tests.factories import AgentTokenFactory
from tests.oauth_helpers import person_access_token

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_search_catalogues():
    """Each test rolls back: team ids and versions repeat, so kept catalogues must go."""
    forget_all()
    yield
    forget_all()


@pytest.fixture
def world(committed) -> dict[str, Any]:
    with committed():
        world = per_person_servers()
    tool_search_index_refresh(server_ids=[world[slug].pk for slug in ("keyed", "tracker", "files")])
    return world


def mark_states(document: dict[str, Any], fmt: str) -> dict[str, str | None]:
    """Each found tool's mark, as its state (None: none), by tool name; in the OpenAI and
    Anthropic formats read back from the description's last line."""
    if fmt in ("native", "mcp"):
        return {
            name: None if mark is None else mark["state"]
            for name, mark in marks(document, fmt).items()
        }
    states = {}
    for name, description in descriptions(document, fmt).items():
        mode = "person_secret" if name.startswith("keyed") else "person_oauth"
        last = description.split("\n\n")[-1]
        found = [state for (m, state), note in NOTES.items() if m == mode and note == last]
        states[name] = found[0] if found else None
    return states


def test_search_answers_mark_a_persons_tools_in_every_format(world, committed, api_client):
    with committed():
        token = person_access_token(world["carol"], world["team"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    before = {}
    for fmt in TOOL_FORMATS:
        answer = api_client.get("/api/v1/catalogue", {"q": "whoami", "format": fmt})
        assert answer.status_code == 200, answer.content
        assert mark_states(answer.json(), fmt) == {
            "files__whoami": None,
            "keyed__whoami": "not_linked",
            "tracker__whoami": "not_linked",
        }, fmt
        before[fmt] = answer["ETag"]
    native = api_client.get("/api/v1/catalogue", {"q": "whoami"}).json()
    assert marks(native, "native")["tracker__whoami"] == {
        "mode": "person_oauth",
        "state": "not_linked",
        "url": PAGE,
    }

    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    for fmt in TOOL_FORMATS:
        answer = api_client.get(
            "/api/v1/catalogue", {"q": "whoami", "format": fmt}, HTTP_IF_NONE_MATCH=before[fmt]
        )
        assert answer.status_code == 200, fmt  # not 304: the mark changed
        assert mark_states(answer.json(), fmt)["keyed__whoami"] == "linked", fmt

    # An agent token of the team reads that it cannot call them, in an answer of its own.
    api_client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {AgentTokenFactory(team=world['team']).plain}"
    )
    for fmt in TOOL_FORMATS:
        answer = api_client.get("/api/v1/catalogue", {"q": "whoami", "format": fmt})
        assert mark_states(answer.json(), fmt) == {
            "files__whoami": None,
            "keyed__whoami": "needs_person",
            "tracker__whoami": "needs_person",
        }, fmt


def test_search_answers_encode_each_callers_marks_as_the_rendered_document(world, committed):
    """The answers joined from entries encoded once per kept catalogue are byte for byte
    `render_tools` with the caller, for callers one after another on one kept catalogue (an
    entry encoded for one caller's mark is never another's)."""
    team = world["team"]
    role = team.roles.get(name="operations")
    agent = token_authenticate(AgentTokenFactory(team=team).plain)
    with committed():
        token = person_access_token(world["carol"], team)
    person = person_token_authenticate(token).identity
    linked = dataclasses.replace(person, upstream_accounts={"keyed": "linked", "tracker": "broken"})
    callers: list[tuple[Caller, str, str]] = [
        (agent, "needs_person", "needs_person"),
        (person, "not_linked", "not_linked"),
        (linked, "linked", "broken"),
        (person, "not_linked", "not_linked"),
    ]
    request = SearchRequest(text="whoami", limit=5)
    for caller, keyed, tracker in callers:
        for fmt in TOOL_FORMATS:
            answer = search_document(
                fmt=fmt,
                team_id=team.pk,
                role_id=role.pk,
                category=None,
                search=request,
                version=7,
                caller=caller,
            )
            found = catalogue_search(
                team_id=team.pk, role_id=role.pk, query="whoami", limit=5, version=7
            )
            expected = render_tools(fmt, found, version=7, preflight=None, caller=caller)
            if isinstance(answer, dict):
                assert answer["tools"] == expected["tools"]
                document = answer
            else:
                assert answer == json.dumps(
                    expected, ensure_ascii=False, separators=(",", ":")
                ).encode("utf-8"), fmt
                document = json.loads(answer)
            assert mark_states(document, fmt) == {
                "files__whoami": None,
                "keyed__whoami": keyed,
                "tracker__whoami": tracker,
            }, (fmt, keyed)


def test_the_gateways_search_mode_marks_what_it_finds_and_pins(world, committed):
    """`find_tools` answers the person's marks, and the search-mode tools/list's pinned tools
    carry them too, kept apart from another caller's list."""
    team = world["team"]
    with committed():
        token = person_access_token(world["carol"], team)
    person = person_token_authenticate(token).identity
    found = search_mode.tools_find(identity=person, query="whoami", limit=10)
    assert mark_states(found, "mcp") == {
        "files__whoami": None,
        "keyed__whoami": "not_linked",
        "tracker__whoami": "not_linked",
    }

    version = catalogue_state(team_id=team.pk).version
    pinned = dataclasses.replace(person, declared_servers={"required": ["keyed"]})
    listed = search_mode.search_mode_document(identity=pinned, version=version)
    assert mark_states({"tools": listed["tools"][:1]}, "mcp") == {"keyed__whoami": "not_linked"}
    agent = dataclasses.replace(
        token_authenticate(AgentTokenFactory(team=team).plain),
        declared_servers={"required": ["keyed"]},
    )
    assert search_mode.search_mode_variant(agent) != search_mode.search_mode_variant(pinned)
    agents = search_mode.search_mode_document(identity=agent, version=version)
    assert mark_states({"tools": agents["tools"][:1]}, "mcp") == {"keyed__whoami": "needs_person"}
