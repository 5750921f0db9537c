"""Probes see failures at once and never hang on them.

- A frozen Redis (cache and broker, as docker-compose.yml runs it) or a database table locked by
  someone else (a migration, a stuck transaction) does not make a real web process's `/readyz`
  or `/metrics` hang: both answer within docker-compose.yml's 10 s health-check timeout, and
  name what does not answer.
- A runtime worker that dies is seen: readiness requires one whenever a server can only run in
  one (started on demand by the gateway, not only auto-started), `/metrics` counts the live
  processes of each role (0 included), and `manage.py probe runtime` fails.
- One worker on every queue (the quickstart's) counts as a worker and as a runtime worker, and a
  runtime worker whose runtime manager stopped answering no longer heartbeats as one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import psycopg
import pytest
from django.core.management import CommandError, call_command

from registry.core.models import ProcessHeartbeat
from tests.catalogue_helpers import approved_server
from tests.celery_worker import CeleryWorker
from tests.owned_postgres import POSTGRES, WebProcess
from tests.owned_redis import OwnedRedis
from tests.waiting import wait_for
from workers.lifecycle import worker_roles
from workers.runtime import RuntimeManager, set_manager

# docker-compose.yml's health checks give web 10 s: an answer later than that restarts it.
HEALTH_CHECK_TIMEOUT = 10


def _read(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": "127.0.0.1"})  # noqa: S310 (ours)
    try:
        with urllib.request.urlopen(request, timeout=HEALTH_CHECK_TIMEOUT) as answer:  # noqa: S310
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.mark.any_database
@pytest.mark.processes
def test_readiness_and_metrics_answer_while_redis_is_frozen_or_a_table_is_locked(
    own_database, tmp_path
):
    redis_server = OwnedRedis(tmp_path / "redis")
    redis_server.start()
    web = WebProcess(
        own_database,
        tmp_path / "web.log",
        {"REDIS_URL": redis_server.url, "CELERY_BROKER_URL": redis_server.url},
    )
    try:
        web.manage("migrate", "--no-input")
        web.start()
        assert _read(f"{web.base}/readyz")[0] == 200

        redis_server.freeze()
        status, body = _read(f"{web.base}/readyz")
        assert status == 200  # degraded: agents still get catalogues from the database
        components = json.loads(body)["components"]
        assert components["cache"]["status"] == "degraded"
        assert components["broker"]["status"] == "failing"
        status, metrics = _read(f"{web.base}/metrics")
        assert status == 200
        assert 'toolroom_component_ok{component="broker"} 0.0' in metrics
        redis_server.thaw()

        with psycopg.connect(f"{POSTGRES}/{own_database}") as locker:
            locker.execute("LOCK TABLE core_processheartbeat IN ACCESS EXCLUSIVE MODE")
            status, body = _read(f"{web.base}/readyz")
            assert status == 200
            components = json.loads(body)["components"]
            assert components["database"]["status"] == "ok"
            assert "statement timeout" in components["workers"]["error"]
            status, metrics = _read(f"{web.base}/metrics")
            assert status == 200
            assert "toolroom_scrape_failed 1.0" in metrics
            assert 'toolroom_component_ok{component="workers"} 0.0' in metrics
            locker.rollback()
        assert "toolroom_scrape_failed 0.0" in _read(f"{web.base}/metrics")[1]
    finally:
        web.stop()
        redis_server.stop()


@pytest.mark.workers
@pytest.mark.django_db(transaction=True)
def test_a_dead_runtime_worker_shows_in_readiness_metrics_and_the_probe(client, tmp_path, settings):
    settings.TOOLROOM_HEARTBEAT_STALE_SECONDS = 3
    # An approved stdio server that nobody auto-starts: the gateway starts it on demand, in a
    # runtime worker, so one must be there.
    approved_server("files")
    log = tmp_path / "worker.log"
    # The quickstart's kind of worker: every queue, the threads pool, runtimes held.
    worker = CeleryWorker(log, env={"TOOLROOM_HEARTBEAT_SECONDS": "0.5"})
    try:
        wait_for(
            lambda: (
                {"worker", "runtime"}
                <= set(
                    ProcessHeartbeat.objects.filter(name=worker.node).values_list("kind", flat=True)
                )
            ),
            timeout=30,
            what="heartbeats as a worker and as a runtime worker",
            log=log,
        )
        components = client.get("/readyz").json()["components"]
        assert (components["workers"]["status"], components["workers"]["alive"]) == ("ok", 1)
        assert (
            components["runtime_workers"]["status"],
            components["runtime_workers"]["alive"],
        ) == (
            "ok",
            1,
        )
        call_command("probe", "worker")
        call_command("probe", "runtime")
    finally:
        worker.kill()

    wait_for(
        lambda: client.get("/readyz").json()["components"]["runtime_workers"]["alive"] == 0,
        timeout=30,
        what="the dead worker's heartbeats to go stale",
    )
    runtime_workers = client.get("/readyz").json()["components"]["runtime_workers"]
    assert runtime_workers["status"] == "degraded"
    metrics = client.get("/metrics").content.decode()
    assert 'toolroom_processes_alive{kind="runtime"} 0.0' in metrics
    assert 'toolroom_processes_alive{kind="worker"} 0.0' in metrics
    assert 'toolroom_component_ok{component="runtime_workers"} 0.0' in metrics
    with pytest.raises(CommandError, match="no fresh runtime heartbeat"):
        call_command("probe", "runtime")


def test_a_runtime_worker_whose_manager_stopped_answering_is_no_runtime_worker_any_more():
    queues = {"toolroom", "runtime", "runtime@host.dq2"}
    manager = RuntimeManager("roles@host", heartbeat_seconds=60)
    manager.start()
    set_manager(manager)
    try:
        assert worker_roles(queues) == ["worker", "runtime"]
        assert worker_roles({"runtime", "runtime@host.dq2"}) == ["runtime"]
        # The manager's event loop ends (its thread died, say): the process may go on serving
        # the general queues, but it holds no runtimes any more.
        manager.loop.call_soon_threadsafe(manager.loop.stop)
        manager._thread.join(timeout=10)

        assert worker_roles(queues) == ["worker"]
        assert worker_roles({"runtime", "runtime@host.dq2"}) == []
    finally:
        set_manager(None)
