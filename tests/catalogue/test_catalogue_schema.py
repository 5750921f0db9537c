"""The OpenAPI schema against the running application (in-process WSGI), with schemathesis and
real authentication: an agent's bearer token and a team owner's session. No answer is a 5xx, and
every error uses the one error format."""

from __future__ import annotations

import collections

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def api_schema(db, redis_cache):
    # As Django's test client does: the test's transaction must outlive each request, so the
    # per-request connection clean-up (which closes a connection inside a transaction) is off.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def credentials(charlie, committed):
    """An agent token of team beta, and charlie's session (owner of alpha), with CSRF.

    The agent is not of charlie's team: hypothesis draws small ids, and a person's drawn
    `POST /api/v1/agents/{id}/revoke` would otherwise revoke the very token the agent requests
    use, leaving every later agent request a 401 (a flaky run, not a finding)."""
    with committed():
        team = TeamFactory(slug="alpha")
        agents_team = TeamFactory(slug="beta")
        services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
        server = approved_server("files", {"read_file": READ, "write_file": WRITE})
        GrantFactory(team=team, server=server)
        GrantFactory(team=agents_team, server=server)
        AgentTokenFactory(team=team, name="alpha-bot")  # something for charlie to revoke
        token = AgentTokenFactory(
            team=agents_team, declared_servers={"required": ["files", "nope"]}
        )
    client = Client()
    client.force_login(charlie)
    csrf = "c" * 32
    return {
        "agent": ({"Authorization": f"Bearer {token.plain}"}, {}),
        "person": (
            {"X-CSRFToken": csrf},
            {"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf},
        ),
    }


SEEN: collections.defaultdict[tuple[str, str], set[int]] = collections.defaultdict(set)


@pytest.mark.exhaustive
def test_no_request_gets_a_server_error(api_schema, credentials):
    """Every operation, with examples hypothesis draws from the schema, as an agent and as a
    person. (schemathesis' pytest plugin does not run under pytest 9 yet: the loop is ours.)"""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    SEEN.clear()
    assert len(operations) >= 14

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case):
            drawn_headers, drawn_cookies = dict(case.headers or {}), dict(case.cookies or {})
            for headers, cookies in credentials.values():
                # Ours win over what the schema's security schemes made hypothesis draw.
                case.headers = {**drawn_headers, **headers}
                case.cookies = {**drawn_cookies, **cookies}
                response = case.call()
                SEEN[(case.operation.method, case.operation.path)].add(response.status_code)
                case.validate_response(response, checks=[not_a_server_error])
                content_type = response.headers.get("Content-Type", [""])[0]
                if response.status_code >= 400 and content_type.startswith("application/json"):
                    assert set(response.json()) == {"error"}, response.text
                    assert {"code", "message", "fields"} <= set(response.json()["error"])

        run()
    # Real authentication reached the views: every operation answered something but 401/403.
    only_refused = {op: codes for op, codes in SEEN.items() if not codes - {401, 403}}
    assert not only_refused, only_refused


def test_the_schema_and_the_docs_are_served_without_a_cdn(client):
    schema_response = client.get("/api/schema/")
    docs = client.get("/api/docs/")

    assert schema_response.status_code == 200
    assert b"/api/v1/catalogue" in schema_response.content
    assert docs.status_code == 200
    assert b"drf_spectacular_sidecar" in docs.content or b"/static/" in docs.content
    assert b"cdn.jsdelivr" not in docs.content
