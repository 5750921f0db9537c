"""AuditEvent: one immutable row per decision or call, with who, what, when and what changed."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    created_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The person who acted, when a person did.",
    )
    actor_label = models.CharField(
        max_length=200,
        help_text="Who acted, as text that outlives the account: a username, "
        "'system', a worker or an agent.",
    )
    action = models.CharField(max_length=80, db_index=True)
    target_type = models.CharField(max_length=60)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=300)
    server = models.ForeignKey(
        "servers.McpServer",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
        help_text="The MCP server the event concerns, for the server's trail.",
    )
    summary = models.TextField()
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
            models.Index(fields=["server", "-created_at"], name="audit_server_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise RuntimeError("Audit events are append-only: an event cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Audit events are append-only: an event cannot be deleted.")
