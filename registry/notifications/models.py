"""Webhook endpoints (a team's or global) and their deliveries: an outbox written in the same
transaction as the access request change it reports, delivered and retried by the workers."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from registry.teams.models import Team


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


class WebhookDelivery(models.Model):
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event = models.CharField(max_length=60)
    payload = models.JSONField()
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["state", "created_at"], name="webhook_delivery_state_idx")]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint.url} ({self.state})"
