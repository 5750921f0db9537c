"""Heartbeats of the long-running processes (workers, runtime workers, beat), for readiness."""

from __future__ import annotations

from django.db import models


class ProcessKind(models.TextChoices):
    WORKER = "worker", "Worker"
    RUNTIME = "runtime", "Runtime worker"
    BEAT = "beat", "Beat"


class ProcessHeartbeat(models.Model):
    """The last sign of life of one process, written every TOOLROOM_HEARTBEAT_SECONDS by the
    process itself (workers/heartbeat.py); `/readyz` and `manage.py probe` read it."""

    name = models.CharField(max_length=200, unique=True, help_text="celery node name, beat@host")
    kind = models.CharField(max_length=20, choices=ProcessKind.choices)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    # What the process saw of its own dependencies (the Docker engine for workers), its queues.
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
