"""Celery tasks: thin entry points that take ids, call one piece of worker code, and retry safely.

Task names are the ones the control plane sends (registry/core/task_queue.py).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import OperationalError

from registry.core import task_queue
from registry.gateway.services import tool_calls_prune
from registry.gateway.usage import usage_rollup, usage_rollup_prune
from registry.notifications.changes import grants_expiring_notify
from registry.notifications.services import access_request_email_legacy
from registry.servers.jobs.discovery import discovery_janitor, discovery_request_stale
from registry.servers.jobs.health import (
    health_claim_due,
    health_dispatch,
    health_history_prune,
    health_record,
)
from registry.servers.jobs.runtime import runtime_reconcile_plan
from registry.upstream.services import upstream_accounts_prune
from workers import lifecycle  # noqa: F401 - connects the worker start/stop hooks
from workers.adapters.sandbox import SandboxError
from workers.celery import app
from workers.discovery import run_discovery
from workers.health import run_health_batch
from workers.notifications import email_send, notifications_deliver_due, webhook_deliver
from workers.runtime import current_manager, warm_holder
from workers.sandbox_pruning import describe_bytes, sandbox_images_prune
from workers.sandbox_storage import storage_volumes_sweep
from workers.sandboxing import clean_up_stale_egress

logger = logging.getLogger(__name__)

# Database hiccups (a lock, a restarted server) are worth a retry; anything else is a bug.
RETRYABLE = (OperationalError,)


@app.task(
    name=task_queue.DISCOVER_SERVER,
    autoretry_for=RETRYABLE,
    retry_backoff=True,
    retry_jitter=True,
    max_retries=3,
)
def discover_server(run_id: int) -> None:
    run_discovery(run_id)


@app.task(name=task_queue.HEALTH_SWEEP)
def health_sweep() -> int:
    """Claim the servers due for a check and fan them out in bounded batches."""
    server_ids = health_claim_due()
    if server_ids:
        health_dispatch(server_ids=server_ids)
    return len(server_ids)


@app.task(name=task_queue.HEALTH_CHECK_BATCH, autoretry_for=RETRYABLE, max_retries=2)
def health_check_batch(server_ids: list[int]) -> int:
    return len(run_health_batch(server_ids))


@app.task(name=task_queue.RUNTIME_PROBE_BATCH, autoretry_for=RETRYABLE, max_retries=2)
def runtime_probe_batch(server_ids: list[int]) -> int:
    manager = current_manager()
    held = [pk for pk in server_ids if warm_holder(pk) is not None]
    cold = [pk for pk in server_ids if pk not in held]
    if held and manager is not None:
        health_record(results=manager.probe_batch(held))
    if cold:
        run_health_batch(cold)
    return len(server_ids)


@app.task(name=task_queue.RUNTIME_COMMAND)
def runtime_command(server_id: int, action: str) -> str:
    manager = current_manager()
    if manager is None:
        logger.error(
            "runtime command %s for server %s reached a worker that holds no runtimes; run a "
            "worker on the 'runtime' queue with the threads pool",
            action,
            server_id,
        )
        return "no runtime manager"
    return manager.command(server_id, action)


@app.task(name=task_queue.RUNTIME_RECONCILE)
def runtime_reconcile() -> dict[str, int]:
    """Start wanted runtimes nobody holds; stop held runtimes nobody wants."""
    plan = runtime_reconcile_plan()
    for pk in plan.start:
        task_queue.send_now(
            task_queue.RUNTIME_COMMAND,
            args=[pk, "start"],
            queue=task_queue.RUNTIME_QUEUE,
            expires=60,
        )
    for pk, owner in plan.stop:
        task_queue.send_now(task_queue.RUNTIME_COMMAND, args=[pk, "stop"], worker=owner, expires=60)
    return {"start": len(plan.start), "stop": len(plan.stop)}


@app.task(name=task_queue.DISCOVERY_JANITOR)
def discovery_janitor_task() -> dict[str, int]:
    """Retry or fail discovery runs whose worker died; send again what the broker lost."""
    return discovery_janitor()


@app.task(name=task_queue.DISCOVERY_SCHEDULE)
def discovery_schedule() -> int:
    """Re-discover approved servers not discovered for a while (catches rug pulls)."""
    return discovery_request_stale(actor="system:schedule")


@app.task(name=task_queue.HEALTH_HISTORY_PRUNE)
def prune_health_history() -> int:
    return health_history_prune()


@app.task(name=task_queue.SANDBOX_EGRESS_CLEAN)
def sandbox_egress_clean(servers: list[str] | None = None) -> list[str]:
    """Remove the kept proxied networks of these servers (all when None) that no longer fit
    their server: retired, no longer proxied, or proxied with another allowlist."""
    try:
        return clean_up_stale_egress(servers)
    except SandboxError as exc:
        logger.warning("Removing stale egress networks skipped: %s", exc.message)
        return []


@app.task(name=task_queue.STORAGE_VOLUMES_SWEEP)
def storage_volumes_sweep_task() -> dict[str, int]:
    """Remove the storage volumes admins deleted, whose server is gone, or whose conversation
    ended without its worker; measure every volume (docs/sandbox.md, "Storage")."""
    try:
        return storage_volumes_sweep()
    except SandboxError as exc:
        logger.warning("Storage volume sweep skipped: %s", exc.message)
        return {"removed": 0, "measured": 0}


@app.task(name=task_queue.SANDBOX_IMAGES_PRUNE)
def sandbox_images_prune_task() -> int:
    """Daily: remove the sandbox images no server uses any more; returns the bytes freed."""
    try:
        report = sandbox_images_prune()
    except SandboxError as exc:
        logger.warning("Sandbox image prune skipped: %s", exc.message)
        return 0
    logger.info(
        "Sandbox image prune: %d image(s) removed, %s freed",
        len(report.removed),
        describe_bytes(report.bytes_freed),
    )
    return report.bytes_freed


# Notifications: each task is one attempt at one outbox row (claimed first, so a duplicate
# message does nothing); retries are rows due again after their backoff, which the beat sweep
# delivers (registry/notifications/services.py). Nothing waits in the broker for hours.


@app.task(name=task_queue.NOTIFICATION_EMAIL)
def notification_email(notification_id: int) -> str:
    return email_send(notification_id)


@app.task(name=task_queue.WEBHOOK_DELIVER)
def webhook_delivery(delivery_id: int) -> str:
    return webhook_deliver(delivery_id)


@app.task(name=task_queue.NOTIFICATIONS_DELIVER_DUE)
def notifications_deliver_due_task() -> dict[str, int]:
    """Beat, every 15 s: deliver the e-mails and webhooks that are due."""
    return notifications_deliver_due()


@app.task(name=task_queue.GRANTS_EXPIRING_NOTIFY)
def grants_expiring_notify_task() -> int:
    """Beat, hourly: tell team owners about access that ends within 14 days (once per end)."""
    return grants_expiring_notify()


@app.task(name=task_queue.UPSTREAM_ACCOUNTS_PRUNE)
def upstream_accounts_prune_task() -> int:
    """Beat, hourly: remove the upstream links of people whose teams' grants on the server all
    ended by expiring (no signal fires when time runs out); how many went."""
    return upstream_accounts_prune(reason="the grants that held it expired")


@app.task(name=task_queue.ACCESS_REQUEST_EMAIL)
def access_request_email(request_id: int, event: str) -> str:
    """A message sent by a version before the outbox: sent through the outbox."""
    return access_request_email_legacy(request_id=request_id, event=event)


@app.task(name=task_queue.GATEWAY_CALLS_PRUNE)
def prune_gateway_calls() -> int:
    """Delete call records older than TOOLROOM_GATEWAY_CALL_RETENTION_DAYS."""
    return tool_calls_prune(keep_days=settings.TOOLROOM_GATEWAY_CALL_RETENTION_DAYS)


@app.task(name=task_queue.GATEWAY_USAGE_ROLLUP, autoretry_for=RETRYABLE, max_retries=3)
def gateway_usage_rollup() -> dict[str, int]:
    """Beat, every 5 minutes: roll call records up by hour (the usage dashboard's data), catching
    up after downtime; drop rollup rows older than TOOLROOM_GATEWAY_USAGE_RETENTION_DAYS."""
    done = usage_rollup()
    done["pruned"] = usage_rollup_prune(keep_days=settings.TOOLROOM_GATEWAY_USAGE_RETENTION_DAYS)
    return done
