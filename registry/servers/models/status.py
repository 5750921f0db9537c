"""A server's runtime record: status row, discovery runs, health samples, sandbox preparation."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from registry.servers.models.servers import McpServer


class Health(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"


class CircuitState(models.TextChoices):
    CLOSED = "closed", "Closed"
    OPEN = "open", "Open"
    HALF_OPEN = "half_open", "Half open"


class RuntimeState(models.TextChoices):
    STOPPED = "stopped", "Stopped"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"


class ServerStatus(models.Model):
    """What the workers observed of a server.

    Kept apart from McpServer so that an admin saving the server's form never overwrites what a
    worker wrote a moment before, and workers never overwrite an admin's edit.
    """

    server = models.OneToOneField(
        McpServer, primary_key=True, on_delete=models.CASCADE, related_name="status"
    )
    health = models.CharField(max_length=20, choices=Health.choices, default=Health.UNKNOWN)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_healthy_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    circuit_state = models.CharField(
        max_length=20, choices=CircuitState.choices, default=CircuitState.CLOSED
    )
    server_info = models.JSONField(default=dict, blank=True)
    protocol_version = models.CharField(max_length=20, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True)
    last_discovered_at = models.DateTimeField(null=True, blank=True)
    last_discovery_error = models.TextField(blank=True)
    vetting_report = models.JSONField(default=dict, blank=True)
    circuit_opened_at = models.DateTimeField(null=True, blank=True)
    # When the next health check is due; the sweep claims servers by moving it forward.
    next_check_at = models.DateTimeField(null=True, blank=True, db_index=True)

    runtime_state = models.CharField(
        max_length=20, choices=RuntimeState.choices, default=RuntimeState.STOPPED
    )
    runtime_owner = models.CharField(
        max_length=200, blank=True, help_text="The runtime worker that holds the warm session."
    )
    runtime_heartbeat_at = models.DateTimeField(null=True, blank=True)
    runtime_started_at = models.DateTimeField(null=True, blank=True)
    runtime_restarts = models.PositiveIntegerField(
        default=0, help_text="Restarts since the runtime was last started on purpose."
    )
    runtime_error = models.TextField(blank=True)
    stderr_tail = models.TextField(blank=True, help_text="The server's last stderr lines.")
    sandbox_image = models.CharField(
        max_length=500, blank=True, help_text="The image the sandboxed server last ran from."
    )
    sandbox_image_digest = models.CharField(max_length=100, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "server statuses"

    def __str__(self) -> str:
        return f"{self.server_id}: {self.health}"


class DiscoveryStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class DiscoveryRun(models.Model):
    """One discovery of a server, from request to result, so long work is visible."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="discoveries")
    status = models.CharField(
        max_length=20, choices=DiscoveryStatus.choices, default=DiscoveryStatus.QUEUED
    )
    trigger = models.CharField(max_length=40, help_text="admin, schedule, command, saved...")
    requested_by = models.CharField(max_length=200)
    requested_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    # The outbox: when the broker took the task (null: not yet, the janitor sends it again).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # The lease of the worker running it, renewed by its heartbeat; past it, the run is stuck
    # and the janitor retries it (or fails it clearly after TOOLROOM_DISCOVERY_MAX_ATTEMPTS).
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    recoveries = models.JSONField(default=list, blank=True, help_text="what the janitor did")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            models.Index(fields=["server", "-requested_at"], name="discovery_server_time_idx")
        ]

    def __str__(self) -> str:
        return f"discovery of {self.server_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (DiscoveryStatus.SUCCEEDED, DiscoveryStatus.FAILED)


class HealthSample(models.Model):
    """One health check's outcome; a bounded history per server gives uptime."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="health_samples")
    checked_at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField()
    latency_ms = models.FloatField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-checked_at", "-id"]
        indexes = [models.Index(fields=["server", "-checked_at"], name="health_server_time_idx")]

    def __str__(self) -> str:
        return f"{self.server_id} {'ok' if self.ok else 'failed'} at {self.checked_at:%H:%M:%S}"


class SandboxPreparationState(models.TextChoices):
    BUILDING = "building", "Building images"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    NO_ENGINE = "no_engine", "No Docker engine"


class SandboxPreparation(models.Model):
    """The sandbox's base images being made ready on this installation's engine (one row,
    written by `manage.py sandbox prepare`, which `make run` starts in the background)."""

    state = models.CharField(max_length=20, choices=SandboxPreparationState.choices)
    step = models.CharField(max_length=300, blank=True, help_text="What is being done now.")
    steps_done = models.PositiveSmallIntegerField(default=0)
    steps_total = models.PositiveSmallIntegerField(default=0)
    detail = models.TextField(blank=True, help_text="Why it failed and the command that fixes it.")
    started_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "sandbox preparation"

    def __str__(self) -> str:
        return f"{self.get_state_display()}: {self.step}" if self.step else self.get_state_display()
