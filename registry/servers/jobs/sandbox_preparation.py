"""The sandbox's readiness on this installation: which base images its servers need, the
progress of building them (shown on the Fleet status page and the server pages), and discovering
the sandboxed servers again once their images exist.

Written by `manage.py sandbox prepare` (a worker-side command: it needs the engine); read by the
admin, which never talks to the engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor
from registry.core.errors import ApplicationError
from registry.servers.jobs.discovery import discovery_request
from registry.servers.models import (
    DiscoveryRun,
    DiscoveryStatus,
    McpServer,
    ReviewStatus,
    SandboxPreparation,
    SandboxPreparationState,
    Transport,
)
from registry.servers.policy import Isolation, NetworkMode

# The one command that gets a machine without an engine or base images ready (it starts
# Debian's Docker engine where none answers, then builds what is missing).
FIX_COMMAND = "scripts/ensure-sandbox-image --no-tests --node"
_NODE_PROGRAMS = frozenset({"node", "npm", "npx"})


@dataclass(frozen=True)
class SandboxNeeds:
    """What the registered sandboxed servers need on the engine."""

    servers: int
    node: bool  # the Node.js base (npm packages, node/npx commands)
    proxy: bool  # the egress proxy (a proxied server)


def _sandboxed_servers() -> list[McpServer]:
    return list(
        McpServer.objects.filter(transport=Transport.STDIO, isolation=Isolation.SANDBOX).exclude(
            review_status=ReviewStatus.RETIRED
        )
    )


def sandbox_egress_allowlists() -> dict[str, tuple[str, ...]]:
    """Server key (slug) -> egress allowlist of every sandboxed server that runs proxied: the
    kept egress networks of any other server, or of another allowlist, are stale."""
    return {
        server.slug: tuple(server.egress_allowlist or ())
        for server in _sandboxed_servers()
        if server.network_mode == NetworkMode.PROXIED
    }


def sandbox_needs() -> SandboxNeeds:
    servers = _sandboxed_servers()
    node = any(
        server.package_registry == "npm"
        or (not server.image and server.command and server.command[0] in _NODE_PROGRAMS)
        for server in servers
    )
    proxy = any(server.network_mode == NetworkMode.PROXIED for server in servers)
    return SandboxNeeds(servers=len(servers), node=node, proxy=proxy)


def sandbox_preparation_record(
    *,
    state: str,
    step: str = "",
    detail: str = "",
    steps_done: int = 0,
    steps_total: int = 0,
    restart: bool = False,
) -> SandboxPreparation:
    """Record where the preparation stands (one row; `restart` starts a new preparation)."""
    if state not in SandboxPreparationState.values:
        raise ApplicationError(f"Unknown sandbox preparation state {state!r}.")
    values = {
        "state": state,
        "step": step[:300],
        "detail": detail,
        "steps_done": steps_done,
        "steps_total": steps_total,
    }
    if restart:
        values["started_at"] = timezone.now()
    preparation, _ = SandboxPreparation.objects.update_or_create(pk=1, defaults=values)
    return preparation


def sandbox_preparation_current() -> SandboxPreparation | None:
    return SandboxPreparation.objects.filter(pk=1).first()


def sandbox_servers_rediscover(*, actor: Actor) -> list[str]:
    """Discover again the sandboxed servers that have never been discovered successfully (their
    image was missing until now); returns their slugs."""
    requested: list[str] = []
    for server in _sandboxed_servers():
        succeeded = DiscoveryRun.objects.filter(
            server=server, status=DiscoveryStatus.SUCCEEDED
        ).exists()
        if succeeded:
            continue
        with transaction.atomic():
            discovery_request(server=server, actor=actor, trigger="sandbox images ready")
        requested.append(server.slug)
    return requested
