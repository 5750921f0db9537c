"""Celery tasks: thin entry points that take ids, call one piece of worker code, and retry safely.

Task names are the ones the control plane sends (registry/core/task_queue.py).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import OperationalError

from registry.core import task_queue
from registry.gateway.services import tool_calls_prune
from registry.notifications.services import (
    WEBHOOK_MAX_RETRIES,
    WebhookRetryableError,
    access_request_email_send,
    webhook_delivery_attempt,
)
from registry.servers.operations.discovery import discovery_janitor, discovery_request_stale
from registry.servers.operations.health import (
    health_claim_due,
    health_dispatch,
    health_history_prune,
    health_record,
)
from registry.servers.operations.runtime import runtime_reconcile_plan
from workers import lifecycle  # noqa: F401 - connects the worker start/stop hooks
from workers.adapters.sandbox import SandboxError
from workers.celery import app
from workers.discovery import run_discovery
from workers.health import run_health_batch
from workers.runtime import current_manager, warm_holder
from workers.sandbox_pruning import describe_bytes, sandbox_images_prune
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


# SMTP refusals and dropped connections are worth retrying; Django raises them as OSError
# subclasses (smtplib.SMTPException included).
@app.task(
    name=task_queue.ACCESS_REQUEST_EMAIL,
    autoretry_for=(OSError, *RETRYABLE),
    retry_backoff=30,
    retry_backoff_max=3600,
    retry_jitter=True,
    max_retries=6,
)
def access_request_email(request_id: int, event: str) -> int:
    return access_request_email_send(request_id=request_id, event=event)


@app.task(
    bind=True,
    name=task_queue.WEBHOOK_DELIVER,
    autoretry_for=(WebhookRetryableError, *RETRYABLE),
    retry_backoff=15,
    retry_backoff_max=3600,
    retry_jitter=True,
    max_retries=WEBHOOK_MAX_RETRIES,
)
def webhook_deliver(self: Any, delivery_id: int) -> str:
    """One attempt at a webhook delivery; the last allowed attempt records the failure."""
    final = self.request.retries >= WEBHOOK_MAX_RETRIES
    return webhook_delivery_attempt(delivery_id=delivery_id, final_attempt=final)


@app.task(name=task_queue.GATEWAY_CALLS_PRUNE)
def prune_gateway_calls() -> int:
    """Delete call records older than TOOLROOM_GATEWAY_CALL_RETENTION_DAYS."""
    return tool_calls_prune(keep_days=settings.TOOLROOM_GATEWAY_CALL_RETENTION_DAYS)
