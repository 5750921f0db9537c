"""The shared circuit's probe in the registry, on a real Redis and database: which refusal names a
probe target, the lease that one call takes, what a passed or failed probe leaves, and no probe
while Redis does not answer (the call stays refused)."""

from __future__ import annotations

import time

import pytest

from registry.audit.models import AuditEvent
from registry.gateway import checks
from registry.gateway.checks import call_check
from registry.gateway.circuit_probe import (
    circuit_probe_claim,
    circuit_probe_failed,
    circuit_probe_passed,
)
from registry.gateway.services import server_circuit_trip
from registry.servers.models import CircuitState, Health, ServerStatus
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.mcp_fixtures import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def tripped(committed, settings):
    """A server whose circuit the gateway opened, granted to a team; open time 10 s."""
    settings.TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS = 10.0
    checks._tables.clear()
    with committed():
        team = TeamFactory(slug="alpha")
        server = approved_server("files", {"read_file": READ})
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team)
        ServerStatus.objects.get_or_create(server=server)
        assert server_circuit_trip(server_id=server.pk, error="connection refused")
    return server, token


def _check(token, *, at=None, arguments=None):
    return call_check(
        identity=token_authenticate(token.plain),
        name="files__read_file",
        arguments={"value": "x"} if arguments is None else arguments,
        at=at,
    )


def test_a_circuit_refusal_names_the_probe_target_after_the_open_time_only(tripped):
    server, token = tripped

    early = _check(token)
    due = _check(token, at=time.time() + 10.5)
    bad_arguments = _check(token, at=time.time() + 10.5, arguments={"undeclared": 1})

    assert (early.code, early.allowed, early.probe_target) == ("circuit_open", False, None)
    assert (due.code, due.allowed, due.target) == ("circuit_open", False, None)
    assert due.probe_target is not None
    assert due.probe_target.server_id == server.pk
    assert (bad_arguments.code, bad_arguments.probe_target) == ("circuit_open", None)


def test_one_call_takes_the_lease_and_a_failed_probe_keeps_it_an_open_time(tripped, settings):
    server, _ = tripped
    settings.TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS = 1.0

    first = circuit_probe_claim(server_id=server.pk, call_seconds=5)
    others = [circuit_probe_claim(server_id=server.pk, call_seconds=5) for _ in range(5)]
    circuit_probe_failed(server_id=server.pk)  # the probe did not reach the server
    during = circuit_probe_claim(server_id=server.pk, call_seconds=5)
    time.sleep(1.2)
    after = circuit_probe_claim(server_id=server.pk, call_seconds=5)

    assert first is not None
    assert others == [None] * 5
    assert during is None
    assert after is not None
    assert ServerStatus.objects.get(server=server).circuit_state == CircuitState.OPEN


def test_a_passed_probe_closes_the_circuit_for_the_next_check(tripped, committed):
    server, token = tripped
    assert circuit_probe_claim(server_id=server.pk, call_seconds=5) is not None
    assert _check(token).code == "circuit_open"

    with committed():
        assert circuit_probe_passed(server_id=server.pk, slug=server.slug)

    status = ServerStatus.objects.get(server=server)
    assert (status.circuit_state, status.health) == (CircuitState.CLOSED, Health.HEALTHY)
    assert status.circuit_opened_at is None
    assert AuditEvent.objects.filter(action="server.circuit_closed", server=server).exists()
    assert _check(token).allowed  # the team's version moved: a new call table
    # A call that still read the open circuit does not probe again for one open time.
    assert circuit_probe_claim(server_id=server.pk, call_seconds=5) is None
    with committed():
        assert not circuit_probe_passed(server_id=server.pk, slug=server.slug)  # already closed


def test_without_redis_no_call_is_the_probe(tripped, settings):
    server, _ = tripped
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "KEY_PREFIX": "nobody-listens",
        }
    }
    started = time.monotonic()

    claim = circuit_probe_claim(server_id=server.pk, call_seconds=5)

    assert claim is None  # refused as before the probe existed; the health check closes it
    assert time.monotonic() - started < 2.0
