"""What a worker does when it starts and stops: clean up after dead predecessors, hold runtimes.

Every worker kills orphaned server processes on its host and starts its heartbeat (beat starts
one too, workers/heartbeat.py). A worker that consumes the runtime
queue with the threads (or solo) pool also runs the RuntimeManager; a prefork runtime worker
would run tasks in child processes that cannot reach the manager, so it is refused loudly. A
worker that stops removes the proxied networks it kept (workers/adapters/sandbox/egress_pool.py).
"""

from __future__ import annotations

import logging
from typing import Any

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
from registry.servers.operations.runtime import runtime_forget_owner
from workers.heartbeat import heartbeat_start, heartbeat_stop, sandbox_state
from workers.janitor import kill_orphans
from workers.runtime import start_manager, stop_manager
from workers.sandboxing import clean_up_orphans, close_kept_egress

logger = logging.getLogger(__name__)


def _consumed_queues(consumer: Any) -> set[str]:
    try:
        return {queue.name for queue in consumer.task_consumer.queues}
    except AttributeError:
        return set()


def _pool_name(consumer: Any) -> str:
    pool = getattr(consumer, "pool", None)
    return type(pool).__module__.rsplit(".", 1)[-1] if pool is not None else ""


@worker_ready.connect
def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    kill_orphans()
    removed = clean_up_orphans()
    if removed:
        logger.warning("removed what dead workers left on the Docker engine: %s", removed)
    queues = sorted(_consumed_queues(sender))
    heartbeat_start(
        kind=ProcessKind.RUNTIME if task_queue.RUNTIME_QUEUE in queues else ProcessKind.WORKER,
        name=sender.hostname,
        details=lambda: {"queues": queues, **sandbox_state()},
    )
    if task_queue.RUNTIME_QUEUE not in queues:
        return
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
    task_queue.send_now(task_queue.RUNTIME_RECONCILE, expires=60)


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

    heartbeat_start(kind=ProcessKind.BEAT, name=f"beat@{socket.gethostname()}", details=dict)


@task_prerun.connect
def on_task_prerun(sender: Any = None, task: Any = None, **kwargs: Any) -> None:
    """Log the task under the id of the request that started it (none for beat's tasks)."""
    given = getattr(getattr(task, "request", None), TASK_HEADER, None)
    current_request_id.set(str(given) if given else None)
    logger.info("task %s started", getattr(task, "name", sender))


@task_postrun.connect
def on_task_postrun(**kwargs: Any) -> None:
    current_request_id.set(None)
