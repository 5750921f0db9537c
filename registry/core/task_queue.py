"""Sending work to the workers by task name, once the current transaction has committed.

The control plane never imports `workers`: it only knows the names of their tasks (listed here
and registered under the same names in workers/tasks.py) and sends them through a send-only
Celery client configured from the same settings as the workers' app, with short socket timeouts
of its own (TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS): a request that sends a task never waits long
on a broker that is frozen. A send the broker does not take raises `BrokerUnavailable`, whose
message says why (down, frozen, refusing writes).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import kombu.exceptions
import redis.exceptions
from celery import Celery
from celery.utils.nodenames import worker_direct
from django.conf import settings
from django.db import transaction
from kombu.entity import Exchange, Queue

from registry.core.request_ids import TASK_HEADER, current_request_id

DISCOVER_SERVER = "toolroom.discover_server"
HEALTH_SWEEP = "toolroom.health_sweep"
HEALTH_CHECK_BATCH = "toolroom.health_check_batch"
HEALTH_HISTORY_PRUNE = "toolroom.health_history_prune"
GATEWAY_CALLS_PRUNE = "toolroom.gateway_calls_prune"
GATEWAY_USAGE_ROLLUP = "toolroom.gateway_usage_rollup"
DISCOVERY_SCHEDULE = "toolroom.discovery_schedule"
DISCOVERY_JANITOR = "toolroom.discovery_janitor"
RUNTIME_RECONCILE = "toolroom.runtime_reconcile"
RUNTIME_COMMAND = "toolroom.runtime_command"
RUNTIME_PROBE_BATCH = "toolroom.runtime_probe_batch"
SANDBOX_IMAGES_PRUNE = "toolroom.sandbox_images_prune"
SANDBOX_EGRESS_CLEAN = "toolroom.sandbox_egress_clean"
STORAGE_VOLUMES_SWEEP = "toolroom.storage_volumes_sweep"
# Sent before the notifications outbox (request id, event); still served for messages in flight.
ACCESS_REQUEST_EMAIL = "toolroom.access_request_email"
NOTIFICATION_EMAIL = "toolroom.notification_email"
WEBHOOK_DELIVER = "toolroom.webhook_deliver"
NOTIFICATIONS_DELIVER_DUE = "toolroom.notifications_deliver_due"
GRANTS_EXPIRING_NOTIFY = "toolroom.grants_expiring_notify"
UPSTREAM_ACCOUNTS_PRUNE = "toolroom.upstream_accounts_prune"

# Queues: general work (health checks, sweeps), discovery (apart, so slow servers being discovered
# can never hold the slots the fleet's health checks need), and the queue every runtime worker
# consumes (it also has a queue of its own, Celery's worker-direct queue "<node name>.dq2", for
# the servers it holds warm).
GENERAL_QUEUE = "toolroom"
DISCOVERY_QUEUE = "discovery"
RUNTIME_QUEUE = "runtime"


# What a broker that is down, frozen or refusing writes raises at a send (kombu wraps connection
# errors in its OperationalError once its retries are spent; a refusal such as MISCONF comes
# straight from redis-py; a timeout or a reset socket can surface as OSError).
BROKER_ERRORS: tuple[type[Exception], ...] = (
    kombu.exceptions.KombuError,
    redis.exceptions.RedisError,
    OSError,
)


# Why Redis refuses a write, by the code its error starts with.
_REFUSALS = {
    "MISCONF": "it cannot save to disk",
    "READONLY": "it is a read-only replica",
    "OOM": "it is out of memory",
}


class BrokerUnavailable(Exception):
    """The broker did not take a task; the message says why, for the caller to pass on."""


def broker_failure_cause(exc: BaseException) -> str:
    """What went wrong with the broker, in a few words (no raw server text beyond its code)."""
    seen: BaseException | None = exc
    while seen is not None:  # kombu wraps the redis-py error it retried
        text = str(seen)
        if isinstance(seen, redis.exceptions.ResponseError):
            # A pipeline's error wraps the server's ("Command # 1 (...) caused error: MISCONF").
            for code, why in _REFUSALS.items():
                if f"{code} " in text:
                    return f"the task broker refuses writes (Redis {code}: {why})"
            return "the task broker answered with an error"
        if isinstance(seen, redis.exceptions.TimeoutError | TimeoutError):
            timeout = settings.TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS
            return f"the task broker did not answer within {timeout:g} s"
        if isinstance(seen, redis.exceptions.ConnectionError | ConnectionError):
            return "the task broker is unreachable"
        seen = seen.__cause__ or seen.__context__
    return f"the task broker failed ({type(exc).__name__})"


@cache
def _client() -> Celery:
    app = Celery("toolroom-registry", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    if settings.CELERY_BROKER_URL.startswith(("redis:", "rediss:")):
        timeout = settings.TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS
        app.conf.broker_transport_options = {
            **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
        }
    return app


def worker_queue(worker: str) -> Queue:
    """A worker's own queue, reached through the default exchange (its routing key is the queue's
    name), not Celery's worker-direct exchange "C.dq2".

    That exchange needs the broker's routing table: with Redis a set `_kombu.binding.C.dq2` that
    a worker writes only as it declares its queues at start, and that a FLUSHDB, a restore from an
    older snapshot, a failover or an eviction can take away; a message sent through it then has
    no route and kombu drops it unseen, until the worker restarts. The default exchange has no
    table: kombu's virtual transports (Redis, the file broker) put the message straight on the
    queue its routing key names, as AMQP's default exchange does. Celery sends there when it is
    given a queue whose exchange is direct and no exchange of the call's own (the shared queues
    go the same way); an `exchange=""` with no queue would send to the default queue's name.
    `no_declare`: a send never declares a queue for a worker that may be gone.
    """
    name: str = worker_direct(worker).name
    direct = Exchange("")  # type: ignore[no-untyped-call]
    return Queue(name, direct, routing_key=name, no_declare=True)  # type: ignore[no-untyped-call]


def send_now(
    name: str,
    *,
    args: tuple[Any, ...] | list[Any] = (),
    queue: str | None = None,
    worker: str | None = None,
    expires: float | None = None,
    countdown: float | None = None,
    retry: bool = True,
) -> None:
    """Send a task at once. `worker` routes it to that runtime worker's own queue; `retry`
    False tries once (a caller waiting on the answer). Raises BrokerUnavailable."""
    options: dict[str, Any] = {}
    if worker:
        options.update(queue=worker_queue(worker))
    else:
        options.update(queue=queue or GENERAL_QUEUE)
    if expires is not None:
        options["expires"] = expires
    if countdown is not None:
        options["countdown"] = countdown
    request_id = current_request_id.get()
    if request_id:
        options["headers"] = {TASK_HEADER: request_id}  # the worker logs under it too
    try:
        _client().send_task(name, args=list(args), retry=retry, **options)
    except BROKER_ERRORS as exc:
        raise BrokerUnavailable(broker_failure_cause(exc)) from exc


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
    logged): what these tasks do is remade by beat's loops (reconcile, sweeps), and what must
    not be lost keeps an outbox of its own that beat's loops deliver: discovery runs
    (registry/servers/jobs/discovery.py), e-mails and webhooks (registry/notifications/).
    """
    transaction.on_commit(
        lambda: send_now(
            name, args=args, queue=queue, worker=worker, expires=expires, countdown=countdown
        ),
        robust=True,
    )
