"""What a worker needs to launch or reach a server, as one plain value (secrets decrypted).

Only the workers read this; it is never shown to people or logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings

from registry.servers.models import McpServer, ServerStatus


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
    allowed_networks: tuple[str, ...] = ()
    isolation: str = "local"
    image: str = ""
    package_registry: str = ""
    package_identifier: str = ""
    package_version: str = ""
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
    restart_policy: str = "on_failure"
    restart_max_attempts: int = 3
    auto_start: bool = False

    @property
    def sandboxed(self) -> bool:
        return self.isolation == "sandbox"


def _negotiated_version(server: McpServer) -> str:
    try:
        status = server.status
    except ServerStatus.DoesNotExist:
        return ""
    return status.protocol_version


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
        allowed_networks=tuple(settings.TOOLROOM_ALLOWED_NETWORKS),
        isolation=server.isolation,
        image=server.image,
        package_registry=server.package_registry,
        package_identifier=server.package_identifier,
        package_version=server.package_version,
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
        restart_policy=server.restart_policy,
        restart_max_attempts=server.restart_max_attempts,
        auto_start=server.auto_start,
    )
