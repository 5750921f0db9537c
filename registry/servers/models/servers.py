"""MCP servers and their categories: the launch spec, trust tier and policy an admin vets.

Rules about a row's own data live in `clean()`; state changes go through `services`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from registry.core.secret_fields import EncryptedJSONField
from registry.servers.dependency_locks import lock_matches
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
from registry.servers.storage import check_storage


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


class UpstreamAuth(models.TextChoices):
    """How Toolroom authenticates to a remote server (docs/authentication.md)."""

    SHARED = "shared", "Shared: the server's own headers"
    PERSON_OAUTH = "person_oauth", "Each person's own OAuth account"
    PERSON_SECRET = "person_secret", "Each person's own secret (a token or API key)"


# The modes where each caller's own credential goes upstream (agent tokens cannot call).
PER_PERSON_MODES = frozenset({UpstreamAuth.PERSON_OAUTH, UpstreamAuth.PERSON_SECRET})

# An HTTP header's name (RFC 9110 token).
header_name_validator = RegexValidator(
    r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", "Not an HTTP header name (letters, digits, - and _)."
)


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
    env_not_secret = models.JSONField(
        default=list,
        blank=True,
        help_text="Names of env variables whose values are not secret (a path, a log level): "
        "shown as they are in errors and on this page instead of masked.",
    )
    headers = EncryptedJSONField(help_text="HTTP headers sent to the server; encrypted at rest.")
    upstream_auth = models.CharField(
        max_length=20,
        choices=UpstreamAuth.choices,
        default=UpstreamAuth.SHARED,
        blank=True,  # empty is shared (forms that predate the field)
        help_text="Remote servers: shared (the headers above), each person's own OAuth account, "
        "or each person's own secret (each caller links or enters theirs in the portal; agent "
        "tokens cannot call it).",
    )
    person_secret_header = models.CharField(
        max_length=100,
        default="Authorization",
        blank=True,
        validators=[header_name_validator],
        help_text="Each person's secret: the header it is sent in (e.g. Authorization, X-Api-Key).",
    )
    person_secret_prefix = models.CharField(
        max_length=40,
        default="Bearer ",
        blank=True,
        help_text="Each person's secret: what comes before it in the header (e.g. 'Bearer '; "
        "empty for a bare API key).",
    )
    package_registry = models.CharField(
        max_length=10, choices=PackageRegistry.choices, default=PackageRegistry.NONE, blank=True
    )
    package_identifier = models.CharField(max_length=300, blank=True)
    package_version = models.CharField(max_length=100, blank=True)
    package_lock = models.JSONField(
        default=dict,
        blank=True,
        help_text="The package's whole dependency tree, every version and hash, resolved once "
        "(registry/servers/dependency_locks.py); the sandbox image is built from exactly it.",
    )
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
    storage = models.JSONField(
        default=list,
        blank=True,
        help_text='Sandboxed servers: volumes kept across restarts, e.g. [{"path": "/data", '
        '"scope": "team", "size_mb": 64}]; scope is server, team or conversation.',
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
        if not self.upstream_auth:
            self.upstream_auth = UpstreamAuth.SHARED
        if not self.isolation:
            self.isolation = tier_policy(self.trust_tier).default_isolation
        super().save(*args, **kwargs)

    @property
    def per_person(self) -> bool:
        """Each caller's own credential goes upstream (docs/authentication.md)."""
        return self.upstream_auth in PER_PERSON_MODES

    def secret_values(self) -> list[str]:
        """The stored env and header values that are secret (all but the env values an admin
        marked as not secret): masked wherever the server's output is kept or shown."""
        public = set(self.env_not_secret or ())
        env = [value for name, value in (self.env or {}).items() if name not in public]
        return [*env, *(self.headers or {}).values()]

    def _gateway_isolation_scope(self) -> str:
        """The gateway's isolation scope for this server (its policy row, else the default)."""
        if self._state.adding:
            return "team"
        try:
            return str(self.gateway_policy.isolation_scope)
        except ObjectDoesNotExist:
            return "team"

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
        try:
            check_storage(self.storage, isolation_scope=self._gateway_isolation_scope())
        except LaunchSpecError as exc:
            add(exc.field, exc.message)
        else:
            if self.storage and (
                self.transport != Transport.STDIO or self.isolation != Isolation.SANDBOX
            ):
                add(
                    "storage",
                    "Storage is for sandboxed stdio servers (a local process already has the "
                    "host's disk; a remote server keeps its own).",
                )
        not_secret = self.env_not_secret
        if not isinstance(not_secret, list) or not all(isinstance(n, str) for n in not_secret):
            add("env_not_secret", "Name the env variables as a list of names.")
        elif set(not_secret) - set(self.env or {}):
            missing = ", ".join(sorted(set(not_secret) - set(self.env or {})))
            add("env_not_secret", f"{missing}: not in the server's env.")

        if self.package_registry and not (self.package_identifier and self.package_version):
            add(
                "package_version",
                "A package reference needs an identifier and a pinned version.",
            )
        if not self.package_registry and (self.package_identifier or self.package_version):
            add("package_registry", "Choose the registry the package comes from.")
        if self.package_lock and not lock_matches(
            self.package_lock,
            registry=self.package_registry,
            identifier=self.package_identifier,
            version=self.package_version,
        ):
            add(
                "package_lock",
                f"The dependency lock is for {self.package_lock.get('identifier')} "
                f"{self.package_lock.get('version')}, not this package: lock it again "
                "(`manage.py lock_dependencies`, or import the entry again).",
            )
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
