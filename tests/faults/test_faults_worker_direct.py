"""A runtime command sent to a worker's own queue reaches it after the broker lost its routing
tables (kombu's `_kombu.binding.*` keys, written only as a worker declares its queues at start:
gone after a FLUSHDB, a restore from an older snapshot, a failover to a replica that lacked them,
an eviction). A real Celery worker on the real Redis holds a server warm; its tables are deleted;
a restart and a stop sent to its own queue must still arrive and take effect, not vanish unseen."""

from __future__ import annotations

import json
import os
import time

import pytest
import redis
from django.conf import settings

from registry.core import task_queue
from registry.servers import services
from registry.servers.jobs.runtime import runtime_request
from registry.servers.models import RuntimeState, ServerStatus
from tests.celery_worker import CeleryWorker
from tests.mcp_fixtures import scenario_argv
from tests.process_hygiene import server_processes_started_by
from tests.waiting import wait_for


@pytest.fixture
def worker(tmp_path):
    # The runtime queue only: restart and stop can come only through the worker's own queue.
    # No beat either: its reconcile would stop an unwanted runtime by itself within 15 s.
    process = CeleryWorker(tmp_path / "worker.log", queues=task_queue.RUNTIME_QUEUE)
    try:
        yield process
    finally:
        process.stop()


def _broker() -> tuple[redis.Redis, str]:
    prefix = str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"])
    assert prefix, "the broker's keys of this run must be apart (tests/settings.py)"
    return redis.Redis.from_url(settings.CELERY_BROKER_URL), prefix


def _delete_routing_tables() -> list[bytes]:
    client, prefix = _broker()
    tables = list(client.scan_iter(f"{prefix}_kombu.binding*"))
    if tables:
        client.delete(*tables)
    return tables


def test_a_send_to_a_workers_own_queue_needs_no_routing_table():
    """What the broker holds right after the send, with no worker and no routing table at all:
    the message sits on "<node>.dq2" (the queue that worker consumes), sent through the default
    exchange; and the send wrote no table of its own for a queue the worker may no longer have."""
    client, prefix = _broker()
    node = "direct-route@nowhere"
    queue = f"{prefix}{node}.dq2"
    _delete_routing_tables()
    try:
        task_queue.send_now(task_queue.RUNTIME_COMMAND, args=[1, "stop"], worker=node)

        [raw] = client.lrange(queue, 0, -1)
        message = json.loads(raw)
        assert message["headers"]["task"] == task_queue.RUNTIME_COMMAND
        assert message["properties"]["delivery_info"] == {
            "exchange": "",
            "routing_key": f"{node}.dq2",
        }
        assert not list(client.scan_iter(f"{prefix}_kombu.binding*{node}*"))
    finally:
        client.delete(queue)


def _state(server) -> str:
    return str(ServerStatus.objects.values_list("runtime_state", flat=True).get(server=server))


@pytest.mark.django_db(transaction=True)
@pytest.mark.workers
def test_a_restart_and_a_stop_reach_the_holder_after_the_broker_lost_its_routing_tables(worker):
    server = services.server_create(
        actor="test",
        slug="direct-stop",
        name="Direct stop",
        transport="stdio",
        command=scenario_argv(),
        trust_tier="builtin",
    )
    services.server_submit_for_review(actor="test", server=server)
    services.server_approve(actor="test", server=server)
    runtime_request(server=server, action="start", actor="test")  # the shared runtime queue
    wait_for(
        lambda: _state(server) == RuntimeState.RUNNING,
        timeout=60,
        what="the warm runtime",
        log=worker.log,
    )
    status = ServerStatus.objects.get(server=server)
    assert status.runtime_owner == worker.node
    tag = f"{os.uname().nodename}:{worker.process.pid}"
    [first] = server_processes_started_by({tag})

    tables = _delete_routing_tables()
    # The worker-direct exchange's table was among them: the old route had nothing left to use.
    assert any(table.endswith(b"_kombu.binding.C.dq2") for table in tables), tables

    # Both go to the holder's own queue. Was: neither arrived (the message had no route and
    # vanished unseen; beat's reconcile sends its stops the same way).
    asked = time.monotonic()
    runtime_request(server=server, action="restart", actor="test")
    wait_for(
        lambda: (
            first not in (pids := server_processes_started_by({tag}))
            and len(pids) == 1
            and _state(server) == RuntimeState.RUNNING
        ),
        timeout=30,
        what="the restart sent to the worker's own queue",
        log=worker.log,
    )
    print(f"restarted {time.monotonic() - asked:.2f} s after the restart was asked for")

    asked = time.monotonic()
    runtime_request(server=server, action="stop", actor="test")
    wait_for(
        lambda: _state(server) == RuntimeState.STOPPED,
        timeout=30,
        what="the stop sent to the worker's own queue",
        log=worker.log,
    )
    print(f"stopped {time.monotonic() - asked:.2f} s after the stop was asked for")
    wait_for(lambda: not server_processes_started_by({tag}), timeout=10, what="the server to end")
    assert worker.process.poll() is None  # the same worker, not a restart that re-declared
