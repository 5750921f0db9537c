"""Delivering the notifications outbox (registry/notifications/services.py) from the workers: one
row as soon as its change committed, and every row that is due from the beat sweep.

Webhooks are POSTed through the guarded connection MCP traffic uses
(workers/adapters/guarded_http.py): the address the network guard checked is the address
connected to, so a receiver's name that resolves differently a moment later (DNS rebinding)
cannot move a delivery onto an internal address.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import anyio
from django.conf import settings
from django.db import close_old_connections

from registry.core.netguard import UnsafeUrlError
from registry.notifications.services import (
    WebhookRequest,
    WebhookUnreachable,
    email_notification_send,
    notifications_due,
    webhook_delivery_attempt,
)
from workers.adapters.guarded_http import PostFailed, PostRefused, guarded_post

logger = logging.getLogger(__name__)

# How many due rows one sweep takes, and how many it delivers at once (a receiver that hangs
# costs one slot its 10 s timeout).
SWEEP_BATCH = 100
SWEEP_CONCURRENCY = 4


def webhook_post(request: WebhookRequest) -> int:
    """POST one delivery through the guarded connection; the answer's status."""
    try:
        return anyio.run(
            lambda: guarded_post(
                request.url,
                body=request.body,
                headers=request.headers,
                timeout=request.timeout,
                allowed_networks=settings.TOOLROOM_ALLOWED_NETWORKS,
            )
        )
    except PostRefused as exc:
        raise UnsafeUrlError(str(exc)) from exc
    except PostFailed as exc:
        raise WebhookUnreachable(str(exc)) from exc


def webhook_deliver(delivery_id: int) -> str:
    return webhook_delivery_attempt(delivery_id=delivery_id, post=webhook_post)


def email_send(notification_id: int) -> str:
    return email_notification_send(notification_id=notification_id)


def _deliver_one(kind: str, pk: int) -> str:
    try:
        state = webhook_deliver(pk) if kind == "webhook" else email_send(pk)
    except Exception:
        logger.exception("the %s notification %s could not be delivered", kind, pk)
        state = "error"
    finally:
        close_old_connections()
    return f"{kind} {state}"


def notifications_deliver_due() -> dict[str, int]:
    """Deliver what is due (a first try the broker never took, a retry whose backoff has
    passed, a row whose worker died): a few at a time, each claimed first, so that nothing is
    sent twice however many sweeps and workers run. Returns how many ended in each state, by
    kind ("webhook delivered", "email pending", ...)."""
    due = notifications_due(limit=SWEEP_BATCH)
    outcomes: dict[str, int] = {}
    if not due:
        return outcomes
    with ThreadPoolExecutor(SWEEP_CONCURRENCY, thread_name_prefix="toolroom-outbox") as pool:
        for state in pool.map(lambda row: _deliver_one(*row), due):
            outcomes[state] = outcomes.get(state, 0) + 1
    logger.info("notifications outbox: %s", outcomes)
    return outcomes
