"""Remove kept egress networks (and their proxies) of servers no longer proxied with that policy."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import docker.errors

from workers.adapters.sandbox import networks
from workers.adapters.sandbox.egress_pool import LABEL_EGRESS_POLICY, REMOVE_TIMEOUT, ROLE_HOLDER
from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.spec import (
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_SERVER,
    default_installation,
)


def remove_stale_egress(
    wanted: Mapping[str, str],
    *,
    installation: str | None = None,
    engine: Engine | None = None,
    servers: Sequence[str] | None = None,
) -> list[str]:
    """Remove the installation's kept egress networks (and their proxies) whose server is not
    proxied any more with that policy: `wanted` maps a server key to its policy
    (`egress_policy`); a server missing from it is retired, deleted or not proxied. `servers`
    limits it to those servers. A network a server's container is still on stays (its session
    ends first). Any process of the installation may call this: the process holding one notices
    its proxy go. Another installation's (whose servers this one does not know) are never
    touched. Returns "network NAME" lines."""
    own = engine is None
    engine = engine or connect_engine()
    removed: list[str] = []
    try:
        kept = {
            "label": [
                f"{LABEL_MANAGED}=true",
                LABEL_EGRESS_POLICY,
                f"{LABEL_INSTALLATION}={installation or default_installation()}",
            ]
        }
        for network in engine.api.networks(filters=kept):
            labels = network.get("Labels") or {}
            server = labels.get(LABEL_SERVER, "")
            if servers is not None and server not in servers:
                continue
            if wanted.get(server) == labels.get(LABEL_EGRESS_POLICY):
                continue
            try:
                attached = engine.api.inspect_network(network["Id"]).get("Containers") or {}
            except docker.errors.NotFound:
                continue
            roles = {container_id: _role_of(engine, container_id) for container_id in attached}
            if _in_use(engine, server, roles):
                continue  # a session is still on it
            for container_id in attached:
                with contextlib.suppress(docker.errors.NotFound):
                    try:
                        engine.api.remove_container(container_id, force=True)
                    except docker.errors.APIError as exc:
                        if exc.status_code != 409:
                            raise
            networks.remove_network_when_empty(engine, network["Id"], timeout=REMOVE_TIMEOUT)
            removed.append(f"network {network['Name']}")
    finally:
        if own:
            engine.close()
    return removed


def _in_use(engine: Engine, server: str, roles: Mapping[str, tuple[str, str]]) -> bool:
    """A server's container is on the network, or in the namespace of its holder (named by ID
    or by name: sessions name the holder, see `EgressLease.network_mode`)."""
    if any(role not in ("proxy", ROLE_HOLDER) for role, _name in roles.values()):
        return True
    holders = {
        f"container:{ident}"
        for cid, (role, name) in roles.items()
        if role == ROLE_HOLDER
        for ident in (cid, name)
        if ident
    }
    servers = engine.api.containers(
        all=True, filters={"label": [f"{LABEL_SERVER}={server}", f"{LABEL_ROLE}=server"]}
    )
    return any((c.get("HostConfig") or {}).get("NetworkMode") in holders for c in servers)


def _role_of(engine: Engine, container_id: str) -> tuple[str, str]:
    """The container's role label and name."""
    try:
        found = engine.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return "proxy", ""  # gone already
    labels = found["Config"].get("Labels") or {}
    return str(labels.get(LABEL_ROLE, "")), str(found.get("Name", "")).lstrip("/")
