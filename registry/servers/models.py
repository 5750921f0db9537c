"""MCP servers, their tools (with every definition ever seen), approvals pinned to a definition
hash, resources, prompts, and the runtime status the workers keep.

Rules about a row's own data live in `clean()`; state changes go through `services`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from registry.core.secret_fields import EncryptedJSONField
from registry.servers.launch_spec import (
    LaunchSpecError,
    check_argv,
    check_egress_allowlist,
    check_env,
    check_headers,
    check_url,
)
from registry.servers.policy import (
    DataSensitivity,
    Isolation,
    NetworkMode,
    TrustTier,
    policy_violations,
    tier_policy,
)


class Category(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self) -> str:
        return self.name


class ReviewStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    PENDING_REVIEW = "pending_review", "Pending review"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    SUSPENDED = "suspended", "Suspended"
    RETIRED = "retired", "Retired"


class Transport(models.TextChoices):
    STDIO = "stdio", "stdio"
    STREAMABLE_HTTP = "streamable_http", "Streamable HTTP"
    SSE = "sse", "SSE (legacy)"


class PackageRegistry(models.TextChoices):
    NONE = "", "None"
    PYPI = "pypi", "PyPI"
    NPM = "npm", "npm"
    OCI = "oci", "OCI image"


class HealthCheckMethod(models.TextChoices):
    TOOLS_LIST = "tools_list", "List tools"
    PING = "ping", "Ping (where the protocol has it)"
    TOOL_CALL = "tool_call", "Call a harmless tool"


class RestartPolicy(models.TextChoices):
    NEVER = "never", "Never"
    ON_FAILURE = "on_failure", "On failure"
    ALWAYS = "always", "Always"


class McpServer(models.Model):
    slug = models.SlugField(max_length=80, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    category = models.ForeignKey(
        Category, null=True, blank=True, on_delete=models.SET_NULL, related_name="servers"
    )
    version = models.CharField(max_length=60, blank=True, help_text="The publisher's version.")
    homepage_url = models.URLField(blank=True)
    repository_url = models.URLField(blank=True)

    trust_tier = models.CharField(
        max_length=20, choices=TrustTier.choices, default=TrustTier.UNTRUSTED
    )
    review_status = models.CharField(
        max_length=20, choices=ReviewStatus.choices, default=ReviewStatus.DRAFT, editable=False
    )
    review_note = models.TextField(
        blank=True, editable=False, help_text="The reason given with the last review decision."
    )
    reviewed_at = models.DateTimeField(null=True, blank=True, editable=False)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    # How the server is launched or reached.
    transport = models.CharField(max_length=20, choices=Transport.choices)
    command = models.JSONField(
        default=list, blank=True, help_text="stdio: the program and its arguments, as a list."
    )
    working_directory = models.CharField(max_length=500, blank=True)
    url = models.CharField(
        max_length=2000, blank=True, help_text="Streamable HTTP or SSE: the endpoint URL."
    )
    env = EncryptedJSONField(help_text="Environment for a stdio server; encrypted at rest.")
    headers = EncryptedJSONField(help_text="HTTP headers sent to the server; encrypted at rest.")
    package_registry = models.CharField(
        max_length=10, choices=PackageRegistry.choices, default=PackageRegistry.NONE, blank=True
    )
    package_identifier = models.CharField(max_length=300, blank=True)
    package_version = models.CharField(max_length=100, blank=True)
    image = models.CharField(
        max_length=500, blank=True, help_text="A container image reference to run the server from."
    )

    # Policy: defaults come from the trust tier; an admin may only tighten them.
    data_sensitivity = models.CharField(
        max_length=20, choices=DataSensitivity.choices, default=DataSensitivity.INTERNAL
    )
    isolation = models.CharField(max_length=10, choices=Isolation.choices, blank=True)
    network_mode = models.CharField(
        max_length=10, choices=NetworkMode.choices, default=NetworkMode.NONE
    )
    egress_allowlist = models.JSONField(
        default=list, blank=True, help_text="host:port entries the proxied network may reach."
    )
    memory_limit_mb = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(32)],
        help_text="Empty: the tier's maximum.",
    )
    cpu_limit = models.DecimalField(
        max_digits=4,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.05"))],
        help_text="Empty: the tier's maximum.",
    )
    pids_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(8)],
        help_text="Empty: the tier's maximum.",
    )

    # Health checks and lifecycle.
    health_check_method = models.CharField(
        max_length=20, choices=HealthCheckMethod.choices, default=HealthCheckMethod.TOOLS_LIST
    )
    health_check_tool = models.CharField(max_length=200, blank=True)
    health_check_arguments = models.JSONField(default=dict, blank=True)
    health_check_interval_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(10), MaxValueValidator(86_400)]
    )
    health_check_timeout_seconds = models.PositiveIntegerField(
        default=10, validators=[MinValueValidator(1), MaxValueValidator(300)]
    )
    health_failure_threshold = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    auto_start = models.BooleanField(
        default=False, help_text="Keep the server running as a warm runtime."
    )
    restart_policy = models.CharField(
        max_length=20, choices=RestartPolicy.choices, default=RestartPolicy.ON_FAILURE
    )
    restart_max_attempts = models.PositiveSmallIntegerField(
        default=3, validators=[MaxValueValidator(100)]
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        permissions = [
            ("review_mcpserver", "Can approve, reject, suspend and retire MCP servers"),
            ("vouch_trust_tier", "Can give imported servers a trust tier above untrusted"),
        ]
        indexes = [models.Index(fields=["review_status"], name="server_status_idx")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.isolation:
            self.isolation = tier_policy(self.trust_tier).default_isolation
        super().save(*args, **kwargs)

    def secret_values(self) -> list[str]:
        """Every stored env and header value: masked wherever the server's output is kept."""
        return [*(self.env or {}).values(), *(self.headers or {}).values()]

    @property
    def is_remote(self) -> bool:
        return self.transport in (Transport.STREAMABLE_HTTP, Transport.SSE)

    @property
    def effective_memory_limit_mb(self) -> int:
        return self.memory_limit_mb or tier_policy(self.trust_tier).max_memory_mb

    @property
    def effective_cpu_limit(self) -> Decimal:
        return self.cpu_limit or tier_policy(self.trust_tier).max_cpus

    @property
    def effective_pids_limit(self) -> int:
        return self.pids_limit or tier_policy(self.trust_tier).max_pids

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}

        def add(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        if not self.isolation:
            self.isolation = tier_policy(self.trust_tier).default_isolation
        try:
            if self.transport == Transport.STDIO:
                check_argv(self.command)
                if self.url:
                    add("url", "A stdio server is launched from its command; leave the URL empty.")
                if self.headers:
                    add("headers", "Headers apply to HTTP servers only.")
            elif self.transport in (Transport.STREAMABLE_HTTP, Transport.SSE):
                if not self.url:
                    add("url", "An HTTP server needs its endpoint URL.")
                else:
                    check_url(self.url, allowed_networks=settings.TOOLROOM_ALLOWED_NETWORKS)
                if self.command:
                    add("command", "An HTTP server is reached by URL; leave the command empty.")
        except LaunchSpecError as exc:
            add(exc.field, exc.message)
        for checker, value in ((check_env, self.env), (check_headers, self.headers)):
            try:
                checker(value or {})
            except LaunchSpecError as exc:
                add(exc.field, exc.message)
        try:
            check_egress_allowlist(self.egress_allowlist)
        except LaunchSpecError as exc:
            add(exc.field, exc.message)
        if self.egress_allowlist and self.network_mode != NetworkMode.PROXIED:
            add("egress_allowlist", "An egress allowlist applies only to the proxied network.")

        if self.package_registry and not (self.package_identifier and self.package_version):
            add(
                "package_version",
                "A package reference needs an identifier and a pinned version.",
            )
        if not self.package_registry and (self.package_identifier or self.package_version):
            add("package_registry", "Choose the registry the package comes from.")
        if self.health_check_method == HealthCheckMethod.TOOL_CALL and not self.health_check_tool:
            add("health_check_tool", "Name the harmless tool the health check should call.")
        if (
            self.health_check_timeout_seconds
            and self.health_check_interval_seconds
            and (self.health_check_timeout_seconds >= self.health_check_interval_seconds)
        ):
            add("health_check_timeout_seconds", "The timeout must be shorter than the interval.")

        for field, message in policy_violations(
            tier=self.trust_tier,
            sensitivity=self.data_sensitivity,
            isolation=self.isolation,
            network_mode=self.network_mode,
            memory_limit_mb=self.memory_limit_mb,
            cpu_limit=self.cpu_limit,
            pids_limit=self.pids_limit,
        ).items():
            add(field, message)
        if errors:
            raise ValidationError(errors)


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


class PermissionClass(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    CONNECT = "connect", "Connect"


class ApprovalState(models.TextChoices):
    UNAPPROVED = "unapproved", "Awaiting approval"
    APPROVED = "approved", "Approved"
    CHANGED = "changed", "Changed since approval"
    REVOKED = "revoked", "Revoked"


class Tool(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    definition = models.JSONField(help_text="The whole definition as the server sent it.")
    definition_hash = models.CharField(max_length=64, db_index=True)

    permission_class_derived = models.CharField(
        max_length=10, choices=PermissionClass.choices, default=PermissionClass.WRITE
    )
    permission_class_override = models.CharField(
        max_length=10, choices=PermissionClass.choices, blank=True
    )
    permission_class = models.CharField(
        max_length=10,
        choices=PermissionClass.choices,
        default=PermissionClass.WRITE,
        editable=False,
        help_text="The override where an admin set one, else what the annotations imply.",
    )

    approval_state = models.CharField(
        max_length=20, choices=ApprovalState.choices, default=ApprovalState.UNAPPROVED
    )
    # The hash the active approval pins; the tool is callable only while it equals
    # `definition_hash`, so a changed definition is unapproved even before anything else runs.
    approved_definition_hash = models.CharField(max_length=64, blank=True)
    findings = models.JSONField(default=list, blank=True)

    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "name"],
                name="tool_unique_name_per_server",
                violation_error_message="This server already has a tool with this name.",
            )
        ]
        indexes = [models.Index(fields=["server", "approval_state"], name="tool_server_state_idx")]
        permissions = [("approve_tool", "Can approve and revoke tool definitions")]

    def __str__(self) -> str:
        return f"{self.server.slug}/{self.name}" if self.server_id else self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.permission_class = self.permission_class_override or self.permission_class_derived
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and (
            "permission_class_override" in update_fields
            or "permission_class_derived" in update_fields
        ):
            kwargs["update_fields"] = {*update_fields, "permission_class"}
        super().save(*args, **kwargs)

    @property
    def is_approved(self) -> bool:
        return (
            self.approval_state == ApprovalState.APPROVED
            and self.approved_definition_hash == self.definition_hash
            and self.removed_at is None
        )

    @property
    def display_title(self) -> str:
        return self.title or str(self.annotations.get("title") or "") or self.name


class ToolRevision(models.Model):
    """Every distinct definition a tool has had, so an admin can diff approved vs current."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="revisions")
    definition_hash = models.CharField(max_length=64)
    definition = models.JSONField()
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-first_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "definition_hash"], name="tool_revision_unique_hash"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_id}@{self.definition_hash[:12]}"


class ApprovalEndReason(models.TextChoices):
    REVOKED = "revoked", "Revoked by an admin"
    DEFINITION_CHANGED = "definition_changed", "The server changed the definition"
    REMOVED = "removed", "The server no longer offers the tool"


class ToolApproval(models.Model):
    """An admin's approval of one exact definition (by hash). At most one is active per tool."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="approvals")
    definition_hash = models.CharField(max_length=64)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    approver_label = models.CharField(max_length=200)
    approved_at = models.DateTimeField(default=timezone.now)
    note = models.TextField(blank=True)
    acknowledged_findings = models.JSONField(
        default=list, blank=True, help_text="The scanner findings the admin saw when approving."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by_label = models.CharField(max_length=200, blank=True)
    end_reason = models.CharField(max_length=30, choices=ApprovalEndReason.choices, blank=True)
    end_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-approved_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool"],
                condition=Q(ended_at__isnull=True),
                name="tool_approval_one_active",
                violation_error_message="This tool already has an active approval.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_id}@{self.definition_hash[:12]} by {self.approver_label}"


class ServerResource(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="resources")
    uri = models.CharField(max_length=1000)
    name = models.CharField(max_length=300, blank=True)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    mime_type = models.CharField(max_length=200, blank=True)
    is_template = models.BooleanField(default=False)

    class Meta:
        ordering = ["uri"]
        constraints = [
            models.UniqueConstraint(fields=["server", "uri"], name="resource_unique_uri")
        ]

    def __str__(self) -> str:
        return self.name or self.uri


class ServerPrompt(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="prompts")
    name = models.CharField(max_length=300)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    arguments = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="prompt_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


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
