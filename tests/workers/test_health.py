"""Health checks: the state machine, backoff with jitter, claims, history, and real probes."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.servers.jobs.health import (
    HealthResult,
    health_claim_due,
    health_history_prune,
    health_record,
    server_uptime,
)
from registry.servers.jobs.launch import server_launch_plan
from registry.servers.models import CircuitState, Health, HealthSample, ServerStatus
from tests.catalogue_helpers import visibility_changes
from tests.factories import McpServerFactory
from tests.mcp_fixtures import (
    scenario_argv,
    server_everything,  # noqa: F401 - a fixture
    start_http_scenario,
)
from workers.health import check_plans

pytestmark = [pytest.mark.django_db, pytest.mark.processes]


def _server(**fields):
    fields.setdefault("review_status", "approved")
    return McpServerFactory(**fields)


def _status(server):
    return ServerStatus.objects.get(server=server)


def test_a_success_makes_a_server_healthy_and_schedules_the_next_check():
    server = _server(health_check_interval_seconds=60)
    health_record(results=[HealthResult(server.pk, ok=True, latency_ms=12.5)])
    status = _status(server)
    assert status.health == Health.HEALTHY
    assert status.latency_ms == 12.5
    assert (
        timedelta(seconds=53)
        < status.next_check_at - status.last_checked_at
        < timedelta(seconds=67)
    )


def test_failures_degrade_then_open_the_circuit_with_growing_backoff(
    django_capture_on_commit_callbacks,
):
    server = _server(health_check_interval_seconds=60, health_failure_threshold=3)
    waits = []
    with django_capture_on_commit_callbacks(execute=True):
        for expected in (Health.DEGRADED, Health.DEGRADED, Health.UNHEALTHY):
            health_record(results=[HealthResult(server.pk, ok=False, error="connection refused")])
            status = _status(server)
            assert status.health == expected
            waits.append((status.next_check_at - status.last_checked_at).total_seconds())
    assert status.circuit_state == CircuitState.OPEN
    assert status.consecutive_failures == 3
    assert status.last_error == "connection refused"
    # 60 s, 120 s, 240 s, each with +-10 % jitter.
    assert 54 <= waits[0] <= 66
    assert 108 <= waits[1] <= 132
    assert 216 <= waits[2] <= 264
    assert AuditEvent.objects.filter(action="server.health_changed", server=server).exists()

    health_record(results=[HealthResult(server.pk, ok=True, latency_ms=5)])
    status = _status(server)
    assert (status.health, status.circuit_state, status.consecutive_failures) == (
        Health.HEALTHY,
        CircuitState.CLOSED,
        0,
    )


def test_the_backoff_never_exceeds_an_hour():
    server = _server(health_check_interval_seconds=600, health_failure_threshold=1)
    for _ in range(10):
        health_record(results=[HealthResult(server.pk, ok=False, error="down")])
    status = _status(server)
    assert status.next_check_at - status.last_checked_at <= timedelta(hours=1, minutes=6)


def test_a_slow_success_is_degraded(settings):
    settings.TOOLROOM_HEALTH_DEGRADED_LATENCY_MS = 100
    server = _server()
    health_record(results=[HealthResult(server.pk, ok=True, latency_ms=250)])
    assert _status(server).health == Health.DEGRADED


def test_a_change_to_or_from_unhealthy_is_announced_to_the_catalogue(
    django_capture_on_commit_callbacks,
):
    server = _server(health_failure_threshold=1)
    with visibility_changes() as received, django_capture_on_commit_callbacks(execute=True):
        health_record(results=[HealthResult(server.pk, ok=False, error="down")])
    assert received == [([server.pk], "server.health_changed")]


def test_a_due_server_is_claimed_once():
    due = _server()
    later = _server()
    ServerStatus.objects.filter(server=later).update(
        next_check_at=timezone.now() + timedelta(minutes=5)
    )
    draft = _server(review_status="draft")

    first = health_claim_due()
    second = health_claim_due()

    assert due.pk in first
    assert later.pk not in first
    assert draft.pk not in first  # drafts are not checked
    assert due.pk not in second


def test_history_keeps_the_newest_samples_and_gives_uptime():
    server = _server()
    now = timezone.now()
    HealthSample.objects.bulk_create(
        HealthSample(server=server, checked_at=now - timedelta(minutes=i), ok=i % 4 != 0)
        for i in range(20)
    )
    assert server_uptime(server_id=server.pk).percent == 75.0

    deleted = health_history_prune(keep=8)

    assert deleted == 12
    kept = list(HealthSample.objects.filter(server=server).values_list("checked_at", flat=True))
    assert len(kept) == 8
    assert min(kept) == now - timedelta(minutes=7)


def test_real_checks_tell_a_working_server_from_broken_ones():
    running = start_http_scenario()
    try:
        healthy_http = _server(transport="streamable_http", command=[], url=running.url)
        healthy_stdio = _server(command=scenario_argv())
        missing = _server(command=["/nope/mcp"])
        silent = _server(
            command=scenario_argv("--hang-on", "start"),
            health_check_timeout_seconds=2,
            health_check_interval_seconds=10,
        )
        tool_fails = _server(
            command=scenario_argv("--crash-on-call"),
            health_check_method="tool_call",
            health_check_tool="echo",
            health_check_arguments={"text": "ping"},
        )
        servers = [healthy_http, healthy_stdio, missing, silent, tool_fails]
        plans = [server_launch_plan(server=s) for s in servers]
        results = {r.server_id: r for r in anyio.run(lambda: check_plans(plans, concurrency=5))}
    finally:
        running.stop()

    assert results[healthy_http.pk].ok
    assert results[healthy_stdio.pk].ok
    assert not results[missing.pk].ok
    assert "not found" in results[missing.pk].error
    assert not results[silent.pk].ok
    assert "2 s" in results[silent.pk].error
    assert not results[tool_fails.pk].ok
    assert "crashing on purpose" in results[tool_fails.pk].error


def test_ping_is_used_only_where_the_protocol_has_it():
    # The scenario server negotiates 2026-07-28 (no ping): the check falls back to tools/list.
    server = _server(command=scenario_argv(), health_check_method="ping")
    [result] = anyio.run(lambda: check_plans([server_launch_plan(server=server)], concurrency=1))
    assert result.ok, result.error


def _check_one(server):
    [result] = anyio.run(lambda: check_plans([server_launch_plan(server=server)], concurrency=1))
    return result


@pytest.mark.parametrize("recorded", ["2026-07-28", "2025-11-25", "", "1999-01-01"])
def test_a_check_opens_its_session_at_the_version_discovery_recorded(recorded):
    # The scenario server speaks both generations: every pinned mode, and negotiation, work.
    server = _server(command=scenario_argv())
    ServerStatus.objects.filter(server=server).update(protocol_version=recorded)
    result = _check_one(server)
    assert result.ok, result.error


def test_a_server_that_changed_its_protocol_is_still_checked(server_everything):  # noqa: F811
    # The npm reference server speaks only the handshake; the record says otherwise.
    server = _server(
        command=server_everything, health_check_timeout_seconds=20, health_check_interval_seconds=60
    )
    ServerStatus.objects.filter(server=server).update(protocol_version="2026-07-28")
    result = _check_one(server)
    assert result.ok, result.error


def test_a_server_the_gateway_wants_is_checked_again_soon_however_often_it_failed(settings):
    """Issue 30, item 4: the doubling backoff (up to an hour) is capped while a call wants the
    server, so a recovered server is callable again within about the cap."""
    from registry.gateway.services import server_circuit_trip

    settings.TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS = 15
    server = _server(health_check_interval_seconds=60, health_failure_threshold=2)
    unwanted = _server(health_check_interval_seconds=60, health_failure_threshold=2)
    for _ in range(6):
        health_record(results=[HealthResult(unwanted.pk, ok=False, error="down")])
    status = _status(unwanted)
    # 60 s doubled five times is 32 min, give or take the 10% jitter (28.8 to 35.2 min).
    assert status.next_check_at - status.last_checked_at > timedelta(minutes=28)

    assert server_circuit_trip(server_id=server.pk, error="connection refused")  # calls failed
    for _ in range(6):
        health_record(results=[HealthResult(server.pk, ok=False, error="down")])
    status = _status(server)
    assert status.circuit_state == CircuitState.OPEN
    assert status.next_check_at - status.last_checked_at <= timedelta(seconds=17)
