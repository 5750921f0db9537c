"""Per-server gateway policy (how the gateway may reach a server) and the audit of every call.

A server without a `ServerGatewayPolicy` row gets the defaults below; the admin edits the row on
the server's page. `ToolCall` rows are append-only, written in batches by the gateway.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class GatewayMode(models.TextChoices):
    ALWAYS_WARM = "always_warm", "Always warm"
    ON_DEMAND = "on_demand", "On demand, stopped when idle"
    NOT_CALLABLE = "not_callable", "Not callable through the gateway"


class IsolationScope(models.TextChoices):
    SHARED = "shared", "Shared: one upstream session for every caller"
    TEAM = "team", "Per team"
    CONVERSATION = "conversation", "Per conversation"


DEFAULT_CALL_DEADLINE_SECONDS = 5.0
DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_QUEUE_LIMIT = 256
DEFAULT_IDLE_STOP_SECONDS = 600


class ServerGatewayPolicy(models.Model):
    server = models.OneToOneField(
        "servers.McpServer",
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="gateway_policy",
    )
    mode = models.CharField(
        max_length=20, choices=GatewayMode.choices, default=GatewayMode.ON_DEMAND
    )
    isolation_scope = models.CharField(
        max_length=20,
        choices=IsolationScope.choices,
        default=IsolationScope.TEAM,
        help_text="Which callers share an upstream session or process. Shared only for servers "
        "whose tools keep no per-caller state.",
    )
    call_deadline_seconds = models.FloatField(
        default=DEFAULT_CALL_DEADLINE_SECONDS,
        validators=[MinValueValidator(0.1), MaxValueValidator(600)],
    )
    max_concurrency = models.PositiveIntegerField(
        default=DEFAULT_MAX_CONCURRENCY, validators=[MinValueValidator(1)]
    )
    queue_limit = models.PositiveIntegerField(
        default=DEFAULT_QUEUE_LIMIT,
        help_text="Calls that may wait for a free slot; more are refused at once.",
    )
    idle_stop_seconds = models.PositiveIntegerField(
        default=DEFAULT_IDLE_STOP_SECONDS, validators=[MinValueValidator(10)]
    )
    pass_identity = models.BooleanField(
        default=False,
        help_text="Send the caller's identity as a short-lived JWT signed by Toolroom.",
    )
    keep_arguments = models.BooleanField(
        default=False, help_text="Keep argument values in the call audit (else size and digest)."
    )
    # Written by the gateway (throttled): an on-demand server is wanted warm until this moment.
    demanded_until = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "gateway policy"
        verbose_name_plural = "gateway policies"

    def __str__(self) -> str:
        return f"gateway policy of {self.server_id}"


class CallOutcome(models.TextChoices):
    OK = "ok", "Answered"
    TOOL_ERROR = "tool_error", "The tool answered with an error"
    REFUSED = "refused", "Refused by Toolroom"
    FAILED = "failed", "Failed upstream"


class ToolCall(models.Model):
    """One call through the gateway: who, what, when, how long, how it ended."""

    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    token_id = models.IntegerField(null=True, blank=True)
    token_name = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    server = models.ForeignKey(
        "servers.McpServer", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    server_slug = models.CharField(max_length=80, blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200, help_text="The namespaced name the agent called.")
    definition_hash = models.CharField(max_length=64, blank=True)
    via = models.CharField(max_length=10, help_text="mcp or rest")
    conversation = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=20, choices=CallOutcome.choices)
    error_class = models.CharField(max_length=40, blank=True)
    error = models.CharField(max_length=500, blank=True)
    argument_bytes = models.PositiveIntegerField(default=0)
    argument_digest = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-started_at"], name="toolcall_team_time_idx"),
            models.Index(fields=["server", "-started_at"], name="toolcall_server_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.started_at:%Y-%m-%d %H:%M:%S} {self.name} {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise RuntimeError("Call records are append-only.")
        super().save(*args, **kwargs)
