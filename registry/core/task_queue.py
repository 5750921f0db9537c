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

DISCOVER_SERVER = "toolroom.discover_server"
HEALTH_SWEEP = "toolroom.health_sweep"
HEALTH_CHECK_BATCH = "toolroom.health_check_batch"
HEALTH_HISTORY_PRUNE = "toolroom.health_history_prune"
GATEWAY_CALLS_PRUNE = "toolroom.gateway_calls_prune"
DISCOVERY_SCHEDULE = "toolroom.discovery_schedule"
RUNTIME_RECONCILE = "toolroom.runtime_reconcile"
RUNTIME_COMMAND = "toolroom.runtime_command"
RUNTIME_PROBE_BATCH = "toolroom.runtime_probe_batch"

# Queues: general work, and the queue every runtime worker consumes (it also has a queue of its
# own, reached through Celery's worker-direct exchange, for the servers it holds warm).
GENERAL_QUEUE = "toolroom"
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
    """Send a task once the current transaction commits, so the worker sees what it refers to."""
    transaction.on_commit(
        lambda: send_now(
            name, args=args, queue=queue, worker=worker, expires=expires, countdown=countdown
        )
    )
