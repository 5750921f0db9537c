"""Discovery runs never get stuck for good: a worker killed mid-run (SIGKILL, a real Celery
worker), a broker that is down when the run is enqueued or loses the message (a redis-server of
the test's own) and a redelivered task all end in a finished run, retried or failed clearly, and a
new request never waits on a dead run."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.core import task_queue
from registry.core.models import ProcessHeartbeat
from registry.servers import services
from registry.servers.jobs.discovery import (
    discovery_claim,
    discovery_janitor,
    discovery_request,
    discovery_runs_stuck,
)
from registry.servers.models import DiscoveryRun, DiscoveryStatus, McpServer
from tests.celery_worker import CeleryWorker
from tests.mcp_fixtures import scenario_argv
from tests.owned_redis import OwnedRedis
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


def _server(slug: str, *flags: str) -> McpServer:
    return services.server_create(
        actor="test",
        slug=slug,
        name=slug.title(),
        transport="stdio",
        command=scenario_argv(*flags),
        trust_tier="builtin",
    )


def _run(server: McpServer) -> DiscoveryRun:
    return DiscoveryRun.objects.filter(server=server).latest("requested_at")


def _expire_lease(run: DiscoveryRun) -> None:
    """What time does to a lease nobody renews (the worker holding it is dead)."""
    DiscoveryRun.objects.filter(pk=run.pk).update(lease_until=timezone.now() - timedelta(seconds=1))


@pytest.fixture
def own_broker(tmp_path, settings):
    """The send-only Celery client of the control plane on a redis-server of this test's own."""
    broker = OwnedRedis(tmp_path / "broker")
    broker.start()
    settings.CELERY_BROKER_URL = broker.url
    task_queue._client.cache_clear()
    yield broker
    broker.stop()
    task_queue._client.cache_clear()


def _queued_messages(broker: OwnedRedis) -> int:
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    return int(redis.Redis.from_url(broker.url).llen(f"{prefix}{task_queue.DISCOVERY_QUEUE}"))


def test_a_run_whose_worker_was_killed_is_retried_and_finishes(tmp_path):
    log = tmp_path / "worker.log"
    first = CeleryWorker(log, env={"TOOLROOM_DISCOVERY_LEASE_SECONDS": "3"})
    try:
        server = _server("hangs", "--hang-on", "list")  # creating it asks for a discovery
        wait_for(
            lambda: _run(server).status == DiscoveryStatus.RUNNING,
            timeout=60,
            what="the discovery to start",
            log=log,
        )
        roles = set(ProcessHeartbeat.objects.filter(name=first.node).values_list("kind", flat=True))
        assert roles == {"worker", "runtime"}  # on every queue, holding runtimes
        call_command("probe", "runtime")  # the health probes of a live worker pass
        call_command("probe", "worker")
    finally:
        first.kill()
    killed = _run(server)
    assert killed.attempts == 1

    # Nobody renews the lease now; within it the run is not stuck, past it the janitor sees it.
    wait_for(lambda: _run(server) in discovery_runs_stuck(), timeout=10, what="the lease to expire")
    McpServer.objects.filter(pk=server.pk).update(command=scenario_argv())  # it answers now
    assert discovery_janitor()["retried"] == 1
    assert _run(server).status == DiscoveryStatus.QUEUED

    second = CeleryWorker(log)
    try:
        wait_for(
            lambda: _run(server).status == DiscoveryStatus.SUCCEEDED,
            timeout=60,
            what="the retried discovery",
            log=log,
        )
    finally:
        second.stop()
    run = _run(server)
    assert run.pk == killed.pk  # the same run, resumed; no second one
    assert run.attempts == 2
    assert "lease expired" in run.recoveries[0]["what"]
    assert server.tools.count() == 3


def test_a_redelivered_task_restarts_only_a_run_whose_lease_expired(own_broker):
    server = _server("redelivered")
    run = _run(server)

    assert discovery_claim(run_id=run.pk) is not None
    assert discovery_claim(run_id=run.pk) is None  # its worker is alive: the duplicate acks
    _expire_lease(run)
    again = discovery_claim(run_id=run.pk)

    assert again is not None
    assert again.attempts == 2


def test_a_run_out_of_attempts_fails_clearly(own_broker, settings):
    server = _server("gives-up")
    run = _run(server)
    for _ in range(settings.TOOLROOM_DISCOVERY_MAX_ATTEMPTS):
        assert discovery_claim(run_id=run.pk) is not None
        _expire_lease(run)

    assert discovery_claim(run_id=run.pk) is None
    assert discovery_janitor()["failed"] == 1
    run.refresh_from_db()
    assert run.status == DiscoveryStatus.FAILED
    assert "gave up after 3 attempts" in run.error
    assert AuditEvent.objects.filter(action="discovery.failed", server=server).exists()


def test_a_new_request_never_reuses_a_dead_run(own_broker):
    server = _server("dead-run")
    dead = _run(server)
    discovery_claim(run_id=dead.pk)
    assert discovery_request(server=server, actor="test", trigger="test").pk == dead.pk

    _expire_lease(dead)

    assert discovery_request(server=server, actor="test", trigger="test").pk != dead.pk


def test_a_run_requested_while_the_broker_is_down_is_sent_once_it_is_back(own_broker):
    own_broker.stop()
    server = _server("outbox")  # commits; the send after commit fails
    run = _run(server)
    assert run.enqueued_at is None

    DiscoveryRun.objects.filter(pk=run.pk).update(
        requested_at=timezone.now() - timedelta(minutes=1)
    )
    assert discovery_janitor()["resent"] == 1  # still down: stays in the outbox
    assert _run(server).enqueued_at is None

    own_broker.start()
    assert discovery_janitor()["resent"] == 1
    assert _run(server).enqueued_at is not None
    assert _queued_messages(own_broker) == 1


def test_a_message_the_broker_lost_is_sent_again(own_broker, settings):
    server = _server("lost")
    assert _queued_messages(own_broker) == 1
    own_broker.stop()
    own_broker.wipe()  # Redis restarted empty: the message is gone
    own_broker.start()
    assert _queued_messages(own_broker) == 0

    assert discovery_janitor() == {"resent": 0, "retried": 0, "failed": 0}  # not yet due
    DiscoveryRun.objects.filter(server=server).update(
        enqueued_at=timezone.now()
        - timedelta(seconds=settings.TOOLROOM_DISCOVERY_REDELIVER_SECONDS + 1)
    )
    assert discovery_janitor()["resent"] == 1
    assert _queued_messages(own_broker) == 1


def test_mcp_status_and_the_fleet_page_show_stuck_and_retried_runs(own_broker, admin_client):
    stuck_server = _server("stuck")
    stuck = _run(stuck_server)
    discovery_claim(run_id=stuck.pk)
    _expire_lease(stuck)
    retried_server = _server("retried")
    retried = _run(retried_server)
    discovery_claim(run_id=retried.pk)
    _expire_lease(retried)
    assert discovery_janitor()["retried"] == 2
    discovery_claim(run_id=retried.pk)
    _expire_lease(stuck)  # stuck again (its second attempt's worker died too)
    DiscoveryRun.objects.filter(pk=stuck.pk).update(status=DiscoveryStatus.RUNNING)

    output = io.StringIO()
    call_command("mcp", "status", stdout=output)
    page = admin_client.get("/admin/servers/mcpserver/fleet/").content.decode()

    text = output.getvalue()
    assert f"stuck run {stuck.pk}: STUCK" in text
    assert f"retried run {retried.pk}: running; attempt 2; recovered 1x" in text
    assert "Discovery runs stuck or retried" in page
    assert "STUCK" in page
    assert "attempt 2" in page
