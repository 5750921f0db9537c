"""Webhook endpoints (a team's or global), their deliveries and the e-mails of access request
changes and change notices: an outbox written in the same transaction as the change it reports,
delivered and retried by the workers (registry/notifications/services.py, docs/notifications.md)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from registry.teams.models import AccessRequest, Team


class WebhookEndpoint(models.Model):
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_endpoints",
        help_text="Empty: a global endpoint, told about every team's access requests.",
    )
    url = models.URLField(max_length=500)
    # Encrypted with TOOLROOM_SECRETS_KEY (registry.core.secret_fields); shown once when created.
    secret_encrypted = models.TextField(editable=False)
    is_active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_by_label = models.CharField(max_length=200, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["team__slug", "url"]

    def __str__(self) -> str:
        return f"{self.url} ({self.team.slug if self.team else 'global'})"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class OutboxEntry(models.Model):
    """What the outbox keeps of one message to deliver: whether it went, how often it was tried,
    when it is due again, and who is trying it now (a lease, so that a worker, a redelivered task
    and the beat sweep never send it at the same time)."""

    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    # Due from this moment (the next try after a failure waits out its backoff).
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # A worker took it until this moment; after it (the worker died), it is due again.
    claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class WebhookDelivery(OutboxEntry):
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event = models.CharField(max_length=60)
    payload = models.JSONField()
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["state", "created_at"], name="webhook_delivery_state_idx"),
            models.Index(fields=["state", "next_attempt_at"], name="webhook_delivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint.url} ({self.state})"


class EmailNotification(OutboxEntry):
    """The e-mails of one access request change (the admins who decide, or the requester), or
    of one change notice (registry/notifications/changes.py: a tool changed upstream, a server
    suspended or retired, access about to end), whose message and addresses are fixed when the
    change commits."""

    access_request = models.ForeignKey(
        AccessRequest,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="email_notifications",
    )
    event = models.CharField(max_length=60)
    # A change notice's message and addresses (empty for an access request's e-mails, which are
    # written from the request when they are sent).
    subject = models.CharField(max_length=300, blank=True)
    body = models.TextField(blank=True)
    recipients = models.JSONField(default=list, blank=True)
    # The Message-ID every copy carries, the same on every retry: mail clients de-duplicate.
    message_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Addresses the SMTP server already took: a retry sends only to the others.
    sent_to = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="email_notification_due_idx"),
        ]

    def __str__(self) -> str:
        if self.access_request_id is None:
            return f"{self.event} e-mail ({self.state})"
        return f"{self.event} e-mail for request {self.access_request_id} ({self.state})"
