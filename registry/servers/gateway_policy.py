"""How the gateway may reach a server (`ServerGatewayPolicy`), and which servers are wanted warm.

The policy is the gateway app's model (its table, migrations, admin page and permissions carry the
`gateway` label) but its code lives here, in the servers room, because the servers' runtime jobs
(`runtime_wanted_q`) and the access rules (`registry.access`) read it and both sit below the
gateway. A server without a row gets the defaults below; the admin edits the row from the server's
page.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from registry.servers.models import McpServer, ReviewStatus, Transport


class GatewayMode(models.TextChoices):
    ALWAYS_WARM = "always_warm", "Always warm"
    ON_DEMAND = "on_demand", "On demand, stopped when idle"
    NOT_CALLABLE = "not_callable", "Not callable through the gateway"


class IsolationScope(models.TextChoices):
    SHARED = "shared", "Shared: one upstream session for every caller"
    TEAM = "team", "Per team"
    CONVERSATION = "conversation", "Per conversation"


DEFAULT_CALL_DEADLINE_SECONDS = 5.0
# How long a call may run while the server reports progress (each report moves the deadline).
DEFAULT_MAX_CALL_SECONDS = 60.0
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
    max_call_seconds = models.FloatField(
        default=DEFAULT_MAX_CALL_SECONDS,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="The longest a call may run: each progress report of the server moves the "
        "call deadline, never past this (from the call's start).",
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
        # The gateway app's table, migrations, admin and permissions (see the module docstring).
        app_label = "gateway"
        verbose_name = "gateway policy"
        verbose_name_plural = "gateway policies"

    def __str__(self) -> str:
        return f"gateway policy of {self.server_id}"

    def clean(self) -> None:
        if self.max_call_seconds < self.call_deadline_seconds:
            raise ValidationError(
                {"max_call_seconds": "The maximum call time is shorter than the call deadline."}
            )


def runtime_wanted_q() -> Q:
    """The servers that should be kept warm: approved, and auto-start, always warm through the
    gateway, or demanded by a recent call."""
    return Q(review_status=ReviewStatus.APPROVED) & (
        Q(auto_start=True)
        | Q(gateway_policy__mode=GatewayMode.ALWAYS_WARM)
        | Q(
            gateway_policy__mode=GatewayMode.ON_DEMAND,
            gateway_policy__demanded_until__gt=timezone.now(),
        )
    )


def server_runtime_wanted(*, server_id: int) -> bool:
    return McpServer.objects.filter(runtime_wanted_q(), pk=server_id).exists()


def runtime_workers_needed() -> bool:
    """Whether some server can only run in a runtime worker: an approved stdio (or sandboxed)
    server kept warm, or callable through the gateway (started on demand at its first call)."""
    return (
        McpServer.objects.filter(review_status=ReviewStatus.APPROVED, transport=Transport.STDIO)
        .filter(Q(auto_start=True) | ~Q(gateway_policy__mode=GatewayMode.NOT_CALLABLE))
        .exists()
    )
