"""Telling people about access requests (and, through registry/notifications/changes.py, about
changes to what their teams use): e-mail (Django's mail framework) and signed webhooks,
through a transactional outbox.

More: docs/notifications.md, "Module notes"."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import secrets
import smtplib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Min, Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.core.netguard import UnsafeUrlError, check_server_url
from registry.core.secret_fields import decrypt_text, encrypt_text
from registry.notifications.models import (
    DeliveryState,
    EmailNotification,
    OutboxEntry,
    WebhookDelivery,
    WebhookEndpoint,
)
from registry.teams.models import AccessRequest, AccessRequestState, Team

EVENTS: dict[str, str] = {
    AccessRequestState.PENDING: "access_request.created",
    AccessRequestState.APPROVED: "access_request.approved",
    AccessRequestState.DENIED: "access_request.denied",
    AccessRequestState.WITHDRAWN: "access_request.withdrawn",
}
DECIDE_PERMISSION = "teams.change_accessrequest"
WEBHOOK_TIMEOUT_SECONDS = 10.0
EMAIL_TIMEOUT_SECONDS = 30.0
SIGNATURE_HEADER = "X-Toolroom-Signature"
RETRYABLE_STATUS = frozenset({408, 425, 429})
WEBHOOK_MAX_ATTEMPTS = 9  # the first and 8 retries
EMAIL_MAX_ATTEMPTS = 7  # the first and 6 retries
WEBHOOK_BACKOFF_SECONDS = 15.0
EMAIL_BACKOFF_SECONDS = 30.0
BACKOFF_MAX_SECONDS = 3600.0
# A worker holds a row this long at most (a webhook's POST takes at most 10 s, an e-mail's SMTP
# exchange 30 s per address); a worker that died lets it go when this passes.
CLAIM_SECONDS = 300

Entry = TypeVar("Entry", bound=OutboxEntry)


class WebhookUnreachable(Exception):
    """The receiver could not be reached or did not answer in time (worth trying again)."""


@dataclass(frozen=True)
class WebhookRequest:
    """One POST of a delivery, as the workers send it."""

    url: str
    body: bytes
    headers: dict[str, str]
    timeout: float


# Sends a WebhookRequest and returns the answer's status; raises UnsafeUrlError when the network
# guard refuses every address, WebhookUnreachable for failures worth a retry.
WebhookPost = Callable[[WebhookRequest], int]


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
    what = (
        f"{request.server.slug}/{request.tool.name}"
        if request.tool is not None
        else request.server.slug
    )
    return what + (f" ({request.role.name} role)" if request.role is not None else "")


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
            "tool": request.tool.name if request.tool is not None else None,
            "role": request.role.name if request.role is not None else None,
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
    """Write this change's e-mail and webhook deliveries to the outbox and ask the workers to
    deliver them once the current transaction commits (call it inside that transaction)."""
    payload = access_request_payload(request, event)
    endpoints = WebhookEndpoint.objects.filter(is_active=True).filter(
        Q(team__isnull=True) | Q(team_id=request.team_id)
    )
    deliveries = [
        WebhookDelivery.objects.create(endpoint=endpoint, event=event, payload=payload)
        for endpoint in endpoints
    ]
    if event != EVENTS[AccessRequestState.WITHDRAWN]:
        email = EmailNotification.objects.create(access_request=request, event=event)
        task_queue.enqueue(task_queue.NOTIFICATION_EMAIL, args=[email.pk])
    for delivery in deliveries:
        task_queue.enqueue(task_queue.WEBHOOK_DELIVER, args=[delivery.pk])
    return deliveries


# --- Claims, outcomes, backoff ------------------------------------------------------------------


def _due(now: datetime) -> Q:
    return Q(state=DeliveryState.PENDING, next_attempt_at__lte=now) & (
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    )


def _claim(model: type[Entry], pk: int) -> Entry | None:
    """Take the row for one attempt if it is due and nobody holds it; None otherwise."""
    now = timezone.now()
    taken = model._default_manager.filter(_due(now), pk=pk).update(
        claimed_until=now + timedelta(seconds=CLAIM_SECONDS)
    )
    if taken != 1:
        return None
    return model._default_manager.get(pk=pk)


def outbox_backoff(*, base: float, attempts: int) -> float:
    """Seconds until the next try after `attempts` failed ones: base x 2^(attempts-1), at most
    an hour, +-10 % jitter."""
    delay: float = min(BACKOFF_MAX_SECONDS, base * 2.0 ** max(0, attempts - 1))
    return delay * random.uniform(0.9, 1.1)  # noqa: S311 (jitter, not a secret)


def _settle(
    model: type[OutboxEntry],
    pk: int,
    *,
    attempts: int,
    error: str,
    retry: bool,
    base: float,
    max_attempts: int,
    **fields: Any,
) -> str:
    """Record an attempt that did not deliver: due again after its backoff, or failed."""
    now = timezone.now()
    if retry and attempts < max_attempts:
        state = DeliveryState.PENDING
        fields["next_attempt_at"] = now + timedelta(
            seconds=outbox_backoff(base=base, attempts=attempts)
        )
    else:
        state = DeliveryState.FAILED
    model._default_manager.filter(pk=pk).update(
        state=state,
        attempts=attempts,
        last_error=error[:2000],
        last_attempt_at=now,
        claimed_until=None,
        **fields,
    )
    return state


def _delivered(model: type[OutboxEntry], pk: int, *, attempts: int, **fields: Any) -> str:
    now = timezone.now()
    model._default_manager.filter(pk=pk).update(
        state=DeliveryState.DELIVERED,
        attempts=attempts,
        last_error="",
        last_attempt_at=now,
        delivered_at=now,
        claimed_until=None,
        **fields,
    )
    return DeliveryState.DELIVERED


def _state_of(model: type[OutboxEntry], pk: int) -> str:
    state = model._default_manager.filter(pk=pk).values_list("state", flat=True).first()
    return str(state) if state is not None else "gone"


def notifications_due(*, limit: int) -> list[tuple[str, int]]:
    """What the sweep delivers now: ("email" | "webhook", id) of due rows nobody holds, the
    longest waiting first."""
    now = timezone.now()
    emails = EmailNotification.objects.filter(_due(now)).order_by("next_attempt_at")
    webhooks = WebhookDelivery.objects.filter(_due(now)).order_by("next_attempt_at")
    due = [
        (moment, "email", pk) for pk, moment in emails.values_list("pk", "next_attempt_at")[:limit]
    ] + [
        (moment, "webhook", pk)
        for pk, moment in webhooks.values_list("pk", "next_attempt_at")[:limit]
    ]
    return [(kind, pk) for _, kind, pk in sorted(due)[:limit]]


@dataclass(frozen=True)
class OutboxBacklog:
    pending: int  # not delivered yet (due now, or waiting for a retry)
    due: int  # due now and nobody on it
    oldest_pending_seconds: float  # age of the oldest one not delivered (0: none)
    failed_24h: int  # given up in the last 24 hours


def notifications_backlog() -> dict[str, OutboxBacklog]:
    """The outbox per kind ("email", "webhook"), for /metrics and the admin."""
    now = timezone.now()
    backlog = {}
    for kind, model in (("email", EmailNotification), ("webhook", WebhookDelivery)):
        rows = model._default_manager.all()
        pending = rows.filter(state=DeliveryState.PENDING)
        oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
        backlog[kind] = OutboxBacklog(
            pending=pending.count(),
            due=rows.filter(_due(now)).count(),
            oldest_pending_seconds=(now - oldest).total_seconds() if oldest else 0.0,
            failed_24h=rows.filter(
                state=DeliveryState.FAILED, last_attempt_at__gte=now - timedelta(days=1)
            ).count(),
        )
    return backlog


def notifications_retry(*, actor: Actor, entries: Sequence[OutboxEntry]) -> int:
    """Make failed e-mails or deliveries due again, from a first attempt (an admin fixed the
    receiver or the mail server); each audited. Returns how many."""
    count = 0
    with transaction.atomic():
        for entry in entries:
            model = type(entry)
            again = model._default_manager.filter(pk=entry.pk, state=DeliveryState.FAILED).update(
                state=DeliveryState.PENDING,
                attempts=0,
                next_attempt_at=timezone.now(),
                claimed_until=None,
            )
            if again:
                count += 1
                audit_record(
                    actor=actor,
                    action="notification.retried",
                    target=entry,
                    summary=f"Made the failed {model._meta.verbose_name} {entry} due again.",
                )
    return count


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


def _email_messages(request: AccessRequest, event: str) -> list[tuple[str, EmailMessage]]:
    """(address, message) for everyone this change is e-mailed to."""
    context = {
        "request": request,
        "what": _what(request),
        "event": event,
        "admin_url": _absolute(reverse("admin:teams_accessrequest_change", args=[request.pk])),
        "portal_url": _absolute(reverse("portal:requests", args=[request.team.slug])),
    }
    if event == EVENTS[AccessRequestState.PENDING]:
        subject = f"[Toolroom] {request.team.name} asks for {_what(request)}"
        body = render_to_string("notifications/access_request_created.txt", context)
        addresses = [user.email for user in access_request_deciders()]  # type: ignore[attr-defined]
        return [
            (address, EmailMessage(subject=subject, body=body, to=[address]))
            for address in addresses
        ]
    if event in (EVENTS[AccessRequestState.APPROVED], EVENTS[AccessRequestState.DENIED]):
        requester = request.requested_by
        if requester is not None and requester.email and requester.is_active:
            decision = request.get_state_display().lower()
            subject = f"[Toolroom] Your request for {_what(request)} was {decision}"
            body = render_to_string("notifications/access_request_decided.txt", context)
            message = EmailMessage(subject=subject, body=body, to=[requester.email])
            return [(requester.email, message)]
    return []


def email_notification_send(*, notification_id: int) -> str:
    """One attempt at the e-mails of one change: to every address the SMTP server has not
    taken yet, each recorded as soon as it is taken. Returns the row's state afterwards (or
    what it already was, if it was not due or someone else holds it)."""
    notification = _claim(EmailNotification, notification_id)
    if notification is None:
        return _state_of(EmailNotification, notification_id)
    attempts = notification.attempts + 1
    if notification.access_request_id is None:  # a change notice, written when it happened
        messages = [
            (
                address,
                EmailMessage(subject=notification.subject, body=notification.body, to=[address]),
            )
            for address in notification.recipients
        ]
    else:
        request = (
            AccessRequest.objects.select_related("team", "server", "tool", "role", "requested_by")
            .filter(pk=notification.access_request_id)
            .first()
        )
        if request is None:  # deleted meanwhile (the row goes with it)
            return _delivered(EmailNotification, notification_id, attempts=attempts)
        messages = _email_messages(request, notification.event)
    sent_to = list(notification.sent_to)
    domain = urlsplit(settings.TOOLROOM_PUBLIC_URL).hostname or "toolroom.invalid"
    try:
        with get_connection(timeout=EMAIL_TIMEOUT_SECONDS) as connection:
            for address, message in messages:
                if address in sent_to:
                    continue
                message.extra_headers["Message-ID"] = f"<{notification.message_id}@{domain}>"
                connection.send_messages([message])
                sent_to.append(address)
                EmailNotification.objects.filter(pk=notification_id).update(sent_to=sent_to)
    except (OSError, smtplib.SMTPException) as exc:
        return _settle(
            EmailNotification,
            notification_id,
            attempts=attempts,
            error=f"{type(exc).__name__}: {exc}",
            retry=True,
            base=EMAIL_BACKOFF_SECONDS,
            max_attempts=EMAIL_MAX_ATTEMPTS,
        )
    return _delivered(EmailNotification, notification_id, attempts=attempts)


def access_request_email_legacy(*, request_id: int, event: str) -> str:
    """A message queued by a version before the outbox (request id, event): made an outbox row
    (once) and sent like any other."""
    request = AccessRequest.objects.filter(pk=request_id).first()
    if request is None:
        return "gone"
    notification, _ = EmailNotification.objects.get_or_create(access_request=request, event=event)
    return email_notification_send(notification_id=notification.pk)


# --- Webhook deliveries -------------------------------------------------------------------------


def webhook_delivery_attempt(*, delivery_id: int, post: WebhookPost) -> str:
    """One attempt at one delivery, POSTed by `post` (the workers' guarded connection). Returns
    the row's state afterwards (or what it already was, if it was not due or someone else holds
    it)."""
    delivery = _claim(WebhookDelivery, delivery_id)
    if delivery is None:
        return _state_of(WebhookDelivery, delivery_id)
    endpoint = WebhookEndpoint.objects.get(pk=delivery.endpoint_id)
    attempts = delivery.attempts + 1
    permanent: dict[str, Any] = {
        "retry": False,
        "base": WEBHOOK_BACKOFF_SECONDS,
        "max_attempts": WEBHOOK_MAX_ATTEMPTS,
    }
    if not endpoint.is_active:
        return _settle(
            WebhookDelivery,
            delivery_id,
            attempts=delivery.attempts,
            error="The endpoint is turned off.",
            **permanent,
        )
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
    status: int | None = None
    try:
        _check_url(endpoint.url)
        status = post(
            WebhookRequest(
                url=endpoint.url, body=body, headers=headers, timeout=WEBHOOK_TIMEOUT_SECONDS
            )
        )
    except (ApplicationError, UnsafeUrlError) as exc:
        return _settle(WebhookDelivery, delivery_id, attempts=attempts, error=str(exc), **permanent)
    except WebhookUnreachable as exc:
        error, retry = str(exc), True
    else:
        if 200 <= status < 300:
            return _delivered(
                WebhookDelivery, delivery_id, attempts=attempts, last_status_code=status
            )
        error = f"The receiver answered {status}."
        retry = status >= 500 or status in RETRYABLE_STATUS
    return _settle(
        WebhookDelivery,
        delivery_id,
        attempts=attempts,
        error=error,
        retry=retry,
        base=WEBHOOK_BACKOFF_SECONDS,
        max_attempts=WEBHOOK_MAX_ATTEMPTS,
        last_status_code=status,
    )
