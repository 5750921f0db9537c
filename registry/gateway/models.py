"""The gateway app's models: the audit of every call, the per-server gateway policy, and each
team's quotas at the gateway (`TeamQuota`; registry/gateway/quotas.py reads and sets them).

`ToolCall` rows are append-only, written in batches by the gateway. `ServerGatewayPolicy` is
defined in `registry.servers.gateway_policy` (its docstring says why) and registered with this
app by the import below.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from registry.servers.gateway_policy import ServerGatewayPolicy

__all__ = [
    "LATENCY_BUCKETS_MS",
    "CallOutcome",
    "CallRollup",
    "CallRollupDay",
    "CallRollupState",
    "ServerGatewayPolicy",
    "TeamQuota",
    "ToolCall",
]

# The upper bounds (ms, inclusive) of the latency buckets each rollup row counts calls in; the
# last bucket takes everything slower. Percentiles over any range are read from the bucket sums
# (registry/gateway/usage.py), so they are exact to the bucket.
LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
BUCKET_FIELDS = tuple(f"b{i:02d}" for i in range(len(LATENCY_BUCKETS_MS) + 1))


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
    # A person's call (an OAuth client acting for them): who, through which app, under which
    # authorization; `token_id` is then the access token of the moment.
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    person_name = models.CharField(max_length=150, blank=True)
    client_name = models.CharField(max_length=255, blank=True)
    client_authorization_id = models.IntegerField(null=True, blank=True)
    role_name = models.CharField(max_length=40, blank=True)
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
    # A per-person server's call (docs/authentication.md, "Upstream accounts"): which upstream
    # account of the person it used, by the account's id (kept after the link goes) and the
    # subject or login the upstream named when linking, if it did; never the token.
    upstream_account_id = models.IntegerField(null=True, blank=True)
    upstream_subject = models.CharField(max_length=300, blank=True)
    # The gateway's name for the record (its journal replays it after a crash): written once.
    record_id = models.CharField(max_length=32, null=True, blank=True, unique=True, editable=False)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-started_at"], name="toolcall_team_time_idx"),
            models.Index(fields=["server", "-started_at"], name="toolcall_server_time_idx"),
            models.Index(fields=["person", "-started_at"], name="toolcall_person_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.started_at:%Y-%m-%d %H:%M:%S} {self.name} {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise RuntimeError("Call records are append-only.")
        super().save(*args, **kwargs)


class TeamQuota(models.Model):
    """A team's own quotas at the gateway; a field left empty takes the default from settings
    (`TOOLROOM_QUOTA_*`), and 0 means no limit. A caller is one agent token, or one person."""

    team = models.OneToOneField("teams.Team", on_delete=models.CASCADE, related_name="quota")
    sessions_per_team = models.PositiveIntegerField(
        null=True, blank=True, help_text="Open handshake sessions of the whole team."
    )
    sessions_per_caller = models.PositiveIntegerField(
        null=True, blank=True, help_text="Open handshake sessions of one agent token or person."
    )
    calls_per_minute_per_team = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls (tools, resources, prompts) a minute, whole team."
    )
    calls_per_minute_per_caller = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls a minute of one agent token or person."
    )
    concurrent_calls_per_team = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls in flight at once, whole team."
    )
    concurrent_calls_per_caller = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls in flight at once of one agent token or person."
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quotas of team {self.team_id}"


class RollupCounts(models.Model):
    """What a rollup row counts (the calls of one team, server, tool, outcome and error class in
    one hour or one day): calls and a fixed-bucket latency histogram (`LATENCY_BUCKETS_MS`), so
    that calls, errors and p50/p95 over any range are sums of rows. `team_id` 0 is "no team";
    ids and names are copied, not keys, so deleting a team or server keeps its history."""

    team_id = models.IntegerField()
    server_slug = models.CharField(max_length=80)
    tool_name = models.CharField(max_length=200)
    outcome = models.CharField(max_length=20, choices=CallOutcome.choices)
    error_class = models.CharField(max_length=40)
    calls = models.PositiveIntegerField()
    duration_ms_sum = models.FloatField()
    b00 = models.PositiveIntegerField(default=0)
    b01 = models.PositiveIntegerField(default=0)
    b02 = models.PositiveIntegerField(default=0)
    b03 = models.PositiveIntegerField(default=0)
    b04 = models.PositiveIntegerField(default=0)
    b05 = models.PositiveIntegerField(default=0)
    b06 = models.PositiveIntegerField(default=0)
    b07 = models.PositiveIntegerField(default=0)
    b08 = models.PositiveIntegerField(default=0)
    b09 = models.PositiveIntegerField(default=0)
    b10 = models.PositiveIntegerField(default=0)
    b11 = models.PositiveIntegerField(default=0)
    b12 = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class CallRollup(RollupCounts):
    """The calls of one clock hour (UTC). Filled and refilled from the raw records by
    `usage_rollup` (registry/gateway/usage.py), never by hand."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "team_id", "server_slug", "tool_name", "outcome", "error_class"],
                name="callrollup_one_row_per_key",
            )
        ]
        indexes = [models.Index(fields=["hour"], name="callrollup_hour_idx")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.server_slug}/{self.tool_name} {self.calls}"


class CallRollupDay(RollupCounts):
    """The calls of one day (UTC), summed from the hourly rows by `usage_rollup`: what the
    30-day view reads (a day has far fewer rows than its 24 hours)."""

    day = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team_id", "server_slug", "tool_name", "outcome", "error_class"],
                name="callrollupday_one_row_per_key",
            )
        ]
        indexes = [models.Index(fields=["day"], name="callrollupday_day_idx")]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} {self.server_slug}/{self.tool_name} {self.calls}"


class CallRollupState(models.Model):
    """One row: the hour up to which the rollup is complete (every earlier hour was rolled up
    after it ended). Its lock serialises concurrent runs."""

    done_until = models.DateTimeField(null=True, blank=True)
    ran_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"rolled up until {self.done_until}"
