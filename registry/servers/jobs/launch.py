"""What a worker needs to launch or reach a server, as one plain value (secrets decrypted).

Only the workers read this; it is never shown to people or logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings

from registry.servers.dependency_locks import lock_speaks_handshake_only
from registry.servers.models import McpServer, ServerStatus
from registry.servers.storage import StorageEntry, check_storage


@dataclass(frozen=True)
class LaunchPlan:
    server_id: int
    slug: str
    name: str
    transport: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    working_directory: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # person_oauth / person_secret: each caller's own token or secret goes upstream (never the
    # plan's); health checks expect the upstream to ask for it.
    upstream_auth: str = "shared"
    # person_oauth: the access token of the admin's account linked for discovery, which the
    # workers put in (workers/discovery_account.py) for discovery and health checks; never here.
    upstream_token: str = field(default="", repr=False)
    allowed_networks: tuple[str, ...] = ()
    isolation: str = "local"
    image: str = ""
    package_registry: str = ""
    package_identifier: str = ""
    package_version: str = ""
    # The recorded dependency lock (registry/servers/dependency_locks.py); {} when none.
    package_lock: dict[str, Any] = field(default_factory=dict)
    # Built on an SDK that speaks only the handshake (its lock says so): never probe 2026-07-28.
    handshake_only: bool = False
    network_mode: str = "none"
    egress_allowlist: tuple[str, ...] = ()
    memory_limit_mb: int = 512
    cpu_limit: Decimal = Decimal("1")
    pids_limit: int = 128
    health_check_method: str = "tools_list"
    health_check_tool: str = ""
    health_check_arguments: dict[str, Any] = field(default_factory=dict)
    health_check_timeout_seconds: int = 10
    discovery_timeout_seconds: int = 60
    # What the last discovery negotiated: health checks open sessions at it without probing.
    protocol_version: str = ""
    # The capabilities it declared then (wire form): a session that adopts that version without
    # `server/discover` learns them from here (whether to listen for tool changes).
    capabilities: dict[str, Any] = field(default_factory=dict)
    restart_policy: str = "on_failure"
    restart_max_attempts: int = 3
    auto_start: bool = False
    # Sandboxed servers' storage (registry/servers/storage.py), and the paths an admin gave an
    # archive to pre-fill new volumes with.
    storage: tuple[StorageEntry, ...] = ()
    seeded_paths: tuple[str, ...] = ()

    @property
    def sandboxed(self) -> bool:
        return self.isolation == "sandbox"


def _negotiated_version(server: McpServer) -> str:
    try:
        status = server.status
    except ServerStatus.DoesNotExist:
        return ""
    return status.protocol_version


def _recorded_capabilities(server: McpServer) -> dict[str, Any]:
    try:
        status = server.status
    except ServerStatus.DoesNotExist:
        return {}
    return dict(status.capabilities or {})


def server_launch_plan(*, server: McpServer) -> LaunchPlan:
    return LaunchPlan(
        server_id=server.pk,
        slug=server.slug,
        name=server.name,
        transport=server.transport,
        argv=tuple(server.command or ()),
        env=dict(server.env or {}),
        working_directory=server.working_directory,
        url=server.url,
        headers=dict(server.headers or {}),
        upstream_auth=server.upstream_auth or "shared",
        allowed_networks=tuple(settings.TOOLROOM_ALLOWED_NETWORKS),
        isolation=server.isolation,
        image=server.image,
        package_registry=server.package_registry,
        package_identifier=server.package_identifier,
        package_version=server.package_version,
        package_lock=dict(server.package_lock or {}),
        handshake_only=lock_speaks_handshake_only(server.package_lock or {}),
        network_mode=server.network_mode,
        egress_allowlist=tuple(server.egress_allowlist or ()),
        memory_limit_mb=server.effective_memory_limit_mb,
        cpu_limit=server.effective_cpu_limit,
        pids_limit=server.effective_pids_limit,
        health_check_method=server.health_check_method,
        health_check_tool=server.health_check_tool,
        health_check_arguments=dict(server.health_check_arguments or {}),
        health_check_timeout_seconds=server.health_check_timeout_seconds,
        discovery_timeout_seconds=settings.TOOLROOM_DISCOVERY_TIMEOUT_SECONDS,
        protocol_version=_negotiated_version(server),
        capabilities=_recorded_capabilities(server),
        restart_policy=server.restart_policy,
        restart_max_attempts=server.restart_max_attempts,
        auto_start=server.auto_start,
        storage=tuple(check_storage(server.storage or [])),
        seeded_paths=tuple(server.storage_seeds.values_list("path", flat=True))
        if server.storage
        else (),
    )


def server_launch_plan_by_id(*, server_id: int) -> LaunchPlan:
    """The launch plan of the server `server_id` (one query)."""
    server = McpServer.objects.select_related("status").get(pk=server_id)
    return server_launch_plan(server=server)
