"""Telling people about access requests: e-mail (Django's mail framework) and signed webhooks.

- When a request is created, decided or withdrawn, `access_request_outbox` runs inside the same
  transaction: it writes one `WebhookDelivery` per active endpoint (the team's and the global
  ones) and, once the transaction commits, sends the workers the e-mail task and one delivery task
  per row. A rolled-back change therefore notifies no one, and a committed one is never lost.
- E-mail: a new request goes to the admins who may decide it (active staff with
  `teams.change_accessrequest`, superusers included, with an address); a decision goes to the
  person who asked.
- Webhooks are POSTed as JSON with `X-Toolroom-Signature: t=<unix time>,v1=<hex>`, where the hex is
  HMAC-SHA256 of `<t>.<body>` keyed with the endpoint's secret. Network errors, timeouts, 408, 429
  and 5xx are retried by the task with exponential backoff; other answers fail at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.core.netguard import UnsafeUrlError, check_resolved_address, check_server_url
from registry.core.secret_fields import decrypt_text, encrypt_text
from registry.notifications.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from registry.teams.models import AccessRequest, AccessRequestState, Team

EVENTS = {
    AccessRequestState.PENDING: "access_request.created",
    AccessRequestState.APPROVED: "access_request.approved",
    AccessRequestState.DENIED: "access_request.denied",
    AccessRequestState.WITHDRAWN: "access_request.withdrawn",
}
DECIDE_PERMISSION = "teams.change_accessrequest"
WEBHOOK_TIMEOUT_SECONDS = 10.0
WEBHOOK_MAX_RETRIES = 8
SIGNATURE_HEADER = "X-Toolroom-Signature"
RETRYABLE_STATUS = frozenset({408, 425, 429})


class WebhookRetryableError(Exception):
    """The receiver may accept the delivery later (network error, timeout, 408/429, 5xx)."""


# --- Endpoints ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreatedEndpoint:
    endpoint: WebhookEndpoint
    secret: str  # shown once; the receiver checks signatures with it


def _check_url(url: str) -> str:
    try:
        return check_server_url(url, allowed_networks=settings.TOOLROOM_ALLOWED_NETWORKS)
    except UnsafeUrlError as exc:
        raise ApplicationError(str(exc), field="url") from exc


@transaction.atomic
def webhook_endpoint_create(
    *, actor: Actor, url: str, team: Team | None = None, description: str = ""
) -> CreatedEndpoint:
    """Register a webhook URL for one team's access requests, or for everyone's (team=None).
    The URL passes the same network guard as MCP server URLs."""
    url = _check_url(url.strip())
    secret = "whsec_" + secrets.token_urlsafe(32)
    endpoint = WebhookEndpoint.objects.create(
        team=team,
        url=url,
        secret_encrypted=encrypt_text(secret),
        description=description.strip(),
        created_by_label=actor_label(actor),
    )
    audit_record(
        actor=actor,
        action="webhook.created",
        target=endpoint,
        summary=f"Added the webhook {url} for "
        + (f"the team {team.name}." if team else "every team."),
        after={"url": url, "team": team.slug if team else None},
    )
    return CreatedEndpoint(endpoint=endpoint, secret=secret)


@transaction.atomic
def webhook_endpoint_deactivate(*, actor: Actor, endpoint: WebhookEndpoint) -> WebhookEndpoint:
    locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    if not locked.is_active:
        return locked
    locked.is_active = False
    locked.save(update_fields=["is_active"])
    audit_record(
        actor=actor,
        action="webhook.deactivated",
        target=locked,
        summary=f"Turned off the webhook {locked.url}.",
    )
    return locked


def webhook_secrets_reencrypt() -> int:
    """Re-encrypt every endpoint's signing secret with the first key of TOOLROOM_SECRETS_KEY
    (part of `manage.py rotate_secrets_key`); returns how many were rewritten."""
    rewritten = 0
    with transaction.atomic():
        for endpoint in WebhookEndpoint.objects.select_for_update().order_by("pk"):
            endpoint.secret_encrypted = encrypt_text(decrypt_text(endpoint.secret_encrypted))
            endpoint.save(update_fields=["secret_encrypted"])
            rewritten += 1
    return rewritten


def webhook_signature(*, secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


# --- The outbox ---------------------------------------------------------------------------------


def _what(request: AccessRequest) -> str:
    what = f"{request.server.slug}/{request.tool.name}" if request.tool_id else request.server.slug  # type: ignore[union-attr]
    return what + (f" ({request.role.name} role)" if request.role_id else "")  # type: ignore[union-attr]


def access_request_payload(request: AccessRequest, event: str) -> dict[str, Any]:
    def iso(moment: Any) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "event": event,
        "sent_at": timezone.now().isoformat(),
        "access_request": {
            "id": request.pk,
            "team": request.team.slug,
            "server": request.server.slug,
            "tool": request.tool.name if request.tool_id else None,  # type: ignore[union-attr]
            "role": request.role.name if request.role_id else None,  # type: ignore[union-attr]
            "state": request.state,
            "justification": request.justification,
            "wished_expires_at": iso(request.wished_expires_at),
            "requested_by": request.requested_by.get_username() if request.requested_by else None,
            "created_at": iso(request.created_at),
            "decided_at": iso(request.decided_at),
            "decided_by": request.decided_by_label or None,
            "decision_reason": request.decision_reason or None,
        },
    }


def access_request_outbox(*, request: AccessRequest, event: str) -> list[WebhookDelivery]:
    """Write the webhook deliveries of this change and queue the e-mail and the deliveries for
    when the current transaction commits (call it inside the transaction of the change)."""
    payload = access_request_payload(request, event)
    endpoints = WebhookEndpoint.objects.filter(is_active=True).filter(
        Q(team__isnull=True) | Q(team_id=request.team_id)
    )
    deliveries = [
        WebhookDelivery.objects.create(endpoint=endpoint, event=event, payload=payload)
        for endpoint in endpoints
    ]
    if event != EVENTS[AccessRequestState.WITHDRAWN]:
        task_queue.enqueue(task_queue.ACCESS_REQUEST_EMAIL, args=[request.pk, event])
    for delivery in deliveries:
        task_queue.enqueue(task_queue.WEBHOOK_DELIVER, args=[delivery.pk])
    return deliveries


# --- E-mail -------------------------------------------------------------------------------------


def access_request_deciders() -> list[AbstractBaseUser]:
    """The admins who may decide access requests and have an address to be told at."""
    users = get_user_model()._default_manager.with_perm(
        DECIDE_PERMISSION,
        include_superusers=True,
        backend="django.contrib.auth.backends.ModelBackend",
    )
    return list(users.filter(is_staff=True, is_active=True).exclude(email="").order_by("pk"))


def _absolute(path: str) -> str:
    base = settings.TOOLROOM_PUBLIC_URL or "http://127.0.0.1:8000"
    return base.rstrip("/") + path


def access_request_email_send(*, request_id: int, event: str) -> int:
    """Send the e-mails of one change; returns how many were sent. SMTP errors propagate (the
    task retries them); a request that is gone sends nothing."""
    request = (
        AccessRequest.objects.select_related("team", "server", "tool", "role", "requested_by")
        .filter(pk=request_id)
        .first()
    )
    if request is None:
        return 0
    context = {
        "request": request,
        "what": _what(request),
        "event": event,
        "admin_url": _absolute(reverse("admin:teams_accessrequest_change", args=[request.pk])),
        "portal_url": _absolute(reverse("portal:requests", args=[request.team.slug])),
    }
    messages: list[EmailMessage] = []
    if event == EVENTS[AccessRequestState.PENDING]:
        subject = f"[Toolroom] {request.team.name} asks for {_what(request)}"
        body = render_to_string("notifications/access_request_created.txt", context)
        messages = [
            EmailMessage(subject=subject, body=body, to=[user.email])  # type: ignore[attr-defined]
            for user in access_request_deciders()
        ]
    elif event in (EVENTS[AccessRequestState.APPROVED], EVENTS[AccessRequestState.DENIED]):
        requester = request.requested_by
        if requester is not None and requester.email and requester.is_active:
            decision = request.get_state_display().lower()
            subject = f"[Toolroom] Your request for {_what(request)} was {decision}"
            body = render_to_string("notifications/access_request_decided.txt", context)
            messages = [EmailMessage(subject=subject, body=body, to=[requester.email])]
    if not messages:
        return 0
    with get_connection() as connection:
        return int(connection.send_messages(messages) or 0)


# --- Webhook deliveries -------------------------------------------------------------------------


def _refuse_internal_peers(url: str) -> None:
    """Resolve the host now and refuse internal addresses, as for MCP servers (a name that
    resolved to a public address when it was registered may not any more)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for *_, sockaddr in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP):
        check_resolved_address(
            str(sockaddr[0]), allowed_networks=settings.TOOLROOM_ALLOWED_NETWORKS
        )


def _record(delivery_id: int, **fields: Any) -> None:
    WebhookDelivery.objects.filter(pk=delivery_id).update(last_attempt_at=timezone.now(), **fields)


def webhook_delivery_attempt(*, delivery_id: int, final_attempt: bool) -> str:
    """POST one delivery. Returns its state afterwards; raises WebhookRetryableError when the
    receiver may take it later and this is not the final attempt."""
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != DeliveryState.PENDING:
        return delivery.state if delivery else "gone"
    endpoint = delivery.endpoint
    if not endpoint.is_active:
        _record(delivery_id, state=DeliveryState.FAILED, last_error="The endpoint is turned off.")
        return DeliveryState.FAILED
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Toolroom-Webhooks/1",
        "X-Toolroom-Event": delivery.event,
        "X-Toolroom-Delivery": str(delivery.delivery_id),
        SIGNATURE_HEADER: webhook_signature(
            secret=decrypt_text(endpoint.secret_encrypted), timestamp=timestamp, body=body
        ),
    }
    attempts = delivery.attempts + 1
    status: int | None = None
    try:
        _check_url(endpoint.url)
        _refuse_internal_peers(endpoint.url)
        with (
            httpx.Client(timeout=WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False) as client,
            # Only the status matters: the receiver's body is never read (it could be huge).
            client.stream("POST", endpoint.url, content=body, headers=headers) as answer,
        ):
            status = answer.status_code
    except (ApplicationError, UnsafeUrlError) as exc:
        _record(delivery_id, attempts=attempts, state=DeliveryState.FAILED, last_error=str(exc))
        return DeliveryState.FAILED
    except (httpx.HTTPError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        retry = True
    else:
        if 200 <= status < 300:
            _record(
                delivery_id,
                attempts=attempts,
                state=DeliveryState.DELIVERED,
                last_status_code=status,
                last_error="",
                delivered_at=timezone.now(),
            )
            return DeliveryState.DELIVERED
        error = f"The receiver answered {status}."
        retry = status >= 500 or status in RETRYABLE_STATUS
    if retry and not final_attempt:
        _record(delivery_id, attempts=attempts, last_status_code=status, last_error=error)
        raise WebhookRetryableError(error)
    _record(
        delivery_id,
        attempts=attempts,
        state=DeliveryState.FAILED,
        last_status_code=status,
        last_error=error,
    )
    return DeliveryState.FAILED
