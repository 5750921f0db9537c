"""Sending work to the workers by task name, once the current transaction has committed.

The control plane never imports `workers`: it only knows the names of their tasks (listed here
and registered under the same names in workers/tasks.py) and sends them through a send-only
Celery client configured from the same settings as the workers' app.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from celery import Celery
from django.db import transaction

from registry.core.request_ids import TASK_HEADER, current_request_id

DISCOVER_SERVER = "toolroom.discover_server"
HEALTH_SWEEP = "toolroom.health_sweep"
HEALTH_CHECK_BATCH = "toolroom.health_check_batch"
HEALTH_HISTORY_PRUNE = "toolroom.health_history_prune"
GATEWAY_CALLS_PRUNE = "toolroom.gateway_calls_prune"
DISCOVERY_SCHEDULE = "toolroom.discovery_schedule"
DISCOVERY_JANITOR = "toolroom.discovery_janitor"
RUNTIME_RECONCILE = "toolroom.runtime_reconcile"
RUNTIME_COMMAND = "toolroom.runtime_command"
RUNTIME_PROBE_BATCH = "toolroom.runtime_probe_batch"
SANDBOX_IMAGES_PRUNE = "toolroom.sandbox_images_prune"
SANDBOX_EGRESS_CLEAN = "toolroom.sandbox_egress_clean"
ACCESS_REQUEST_EMAIL = "toolroom.access_request_email"
WEBHOOK_DELIVER = "toolroom.webhook_deliver"

# Queues: general work (health checks, sweeps), discovery (apart, so slow servers being discovered
# can never hold the slots the fleet's health checks need), and the queue every runtime worker
# consumes (it also has a queue of its own, reached through Celery's worker-direct exchange, for
# the servers it holds warm).
GENERAL_QUEUE = "toolroom"
DISCOVERY_QUEUE = "discovery"
RUNTIME_QUEUE = "runtime"
WORKER_DIRECT_EXCHANGE = "C.dq2"


@cache
def _client() -> Celery:
    app = Celery("toolroom-registry", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def send_now(
    name: str,
    *,
    args: tuple[Any, ...] | list[Any] = (),
    queue: str | None = None,
    worker: str | None = None,
    expires: float | None = None,
    countdown: float | None = None,
) -> None:
    """Send a task at once. `worker` routes it to that runtime worker's own queue."""
    options: dict[str, Any] = {}
    if worker:
        options.update(exchange=WORKER_DIRECT_EXCHANGE, routing_key=worker)
    else:
        options.update(queue=queue or GENERAL_QUEUE)
    if expires is not None:
        options["expires"] = expires
    if countdown is not None:
        options["countdown"] = countdown
    request_id = current_request_id.get()
    if request_id:
        options["headers"] = {TASK_HEADER: request_id}  # the worker logs under it too
    _client().send_task(name, args=list(args), **options)


def enqueue(
    name: str,
    *,
    args: tuple[Any, ...] | list[Any] = (),
    queue: str | None = None,
    worker: str | None = None,
    expires: float | None = None,
    countdown: float | None = None,
) -> None:
    """Send a task once the current transaction commits, so the worker sees what it refers to.

    A broker that is down does not fail the request that committed (`robust`: the error is
    logged): what these tasks do is remade by beat's loops (reconcile, sweeps), and discovery,
    which must not be lost, keeps its own outbox (registry/servers/operations/discovery.py).
    """
    transaction.on_commit(
        lambda: send_now(
            name, args=args, queue=queue, worker=worker, expires=expires, countdown=countdown
        ),
        robust=True,
    )
