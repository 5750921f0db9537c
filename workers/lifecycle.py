"""What a worker does when it starts and stops: clean up after dead predecessors, hold runtimes.

More: docs/workers.md, "Module notes".
"""

from __future__ import annotations

import logging
from typing import Any

from celery.bootsteps import RUN
from celery.signals import (
    beat_init,
    task_postrun,
    task_prerun,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from registry.core import task_queue
from registry.core.models import ProcessKind
from registry.core.request_ids import TASK_HEADER, current_request_id
from registry.servers.jobs.runtime import runtime_forget_owner
from workers.heartbeat import heartbeat_start, heartbeat_stop, sandbox_state
from workers.janitor import kill_orphans
from workers.runtime import current_manager, start_manager, stop_manager
from workers.sandboxing import clean_up_orphans, close_kept_egress

logger = logging.getLogger(__name__)

# Celery's worker-direct queue of a worker is named after it: "<node name>.dq2".
WORKER_DIRECT_SUFFIX = ".dq2"


def _consumed_queues(consumer: Any) -> set[str]:
    try:
        return {queue.name for queue in consumer.task_consumer.queues}
    except AttributeError:
        return set()


def _pool_name(consumer: Any) -> str:
    pool = getattr(consumer, "pool", None)
    return type(pool).__module__.rsplit(".", 1)[-1] if pool is not None else ""


def _serving(consumer: Any) -> bool:
    """The worker runs (not stopping, for whatever reason: a signal, an unrecoverable error)."""
    controller = getattr(consumer, "controller", None)
    blueprint = getattr(controller, "blueprint", None)
    return blueprint is None or blueprint.state == RUN


def worker_roles(queues: set[str], *, consumer: Any = None) -> list[str]:
    """The roles a worker consuming `queues` plays now (see the module's docstring)."""
    if consumer is not None and not _serving(consumer):
        return []
    roles: list[str] = []
    general = {
        queue
        for queue in queues
        if queue != task_queue.RUNTIME_QUEUE and not queue.endswith(WORKER_DIRECT_SUFFIX)
    }
    if general:
        roles.append(ProcessKind.WORKER)
    manager = current_manager()
    if task_queue.RUNTIME_QUEUE in queues and manager is not None and manager.responsive():
        roles.append(ProcessKind.RUNTIME)
    return roles


@worker_ready.connect
def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    kill_orphans()
    removed = clean_up_orphans()
    if removed:
        logger.warning("removed what dead workers left on the Docker engine: %s", removed)
    queues = _consumed_queues(sender)
    if task_queue.RUNTIME_QUEUE in queues:
        _start_runtimes(sender)
    heartbeat_start(
        roles=lambda: worker_roles(queues, consumer=sender),
        name=sender.hostname,
        details=lambda: {"queues": sorted(queues), **sandbox_state()},
    )


def _start_runtimes(sender: Any) -> None:
    pool = _pool_name(sender)
    if pool not in ("thread", "solo"):
        logger.error(
            "this worker consumes the runtime queue with the %r pool; warm runtimes need the "
            "threads pool (celery worker -P threads -Q runtime); not holding any",
            pool,
        )
        return
    owner = sender.hostname
    runtime_forget_owner(owner=owner)
    start_manager(owner)
    logger.info("runtime manager started as %s", owner)
    try:
        task_queue.send_now(task_queue.RUNTIME_RECONCILE, expires=60)
    except task_queue.BrokerUnavailable as exc:
        logger.warning("first reconcile not sent (beat sends the next one): %s", exc)


@worker_shutdown.connect
def on_worker_shutdown(**kwargs: Any) -> None:
    heartbeat_stop()
    stop_manager()
    # The kept proxied networks go with the worker (its sessions are over by now); were it
    # killed, its proxies exit with it and the janitor removes the networks at the next start.
    close_kept_egress()


@worker_process_shutdown.connect
def on_worker_process_shutdown(**kwargs: Any) -> None:
    close_kept_egress()  # a prefork child's own kept networks


@beat_init.connect
def on_beat_init(sender: Any = None, **kwargs: Any) -> None:
    import socket  # noqa: PLC0415

    heartbeat_start(
        roles=lambda: [ProcessKind.BEAT], name=f"beat@{socket.gethostname()}", details=dict
    )


@task_prerun.connect
def on_task_prerun(sender: Any = None, task: Any = None, **kwargs: Any) -> None:
    """Log the task under the id of the request that started it (none for beat's tasks)."""
    given = getattr(getattr(task, "request", None), TASK_HEADER, None)
    current_request_id.set(str(given) if given else None)
    logger.info("task %s started", getattr(task, "name", sender))


@task_postrun.connect
def on_task_postrun(**kwargs: Any) -> None:
    current_request_id.set(None)
