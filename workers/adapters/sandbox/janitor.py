"""The janitor that removes what a dead worker left on the engine, and a summary of what is there.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import docker.errors

from workers.adapters.sandbox.engine import Engine, connect_engine, engine_version
from workers.adapters.sandbox.images import BASE_IMAGE, NODE_BASE_IMAGE, image_digest
from workers.adapters.sandbox.networks import (
    ROLE_EGRESS_NETWORK,
    remove_network_when_empty,
    surplus_egress_networks,
)
from workers.adapters.sandbox.spec import (
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_ROLE,
    LABEL_SERVER,
    LABEL_SESSION,
    default_installation,
    process_start_time,
)


def _held_by_live_process(labels: dict[str, str]) -> bool:
    if labels.get(LABEL_OWNER_HOST) != socket.gethostname():
        return False
    pid_text, _, started = labels.get(LABEL_OWNER_PID, "").partition("@")
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    return not started or started == "0" or process_start_time(pid) in (None, started)


def _label_filters(owner: str | None, installation: str) -> dict[str, list[str]]:
    labels = [f"{LABEL_MANAGED}=true", LABEL_SESSION, f"{LABEL_INSTALLATION}={installation}"]
    if owner is not None:
        labels.append(f"{LABEL_OWNER}={owner}")
    return {"label": labels}


def remove_orphans(
    *,
    owner_label_value: str | None = None,
    installation: str | None = None,
    engine: Engine | None = None,
) -> list[str]:
    """Remove the installation's session containers and networks whose owning process is gone.

    `owner_label_value` limits it to one owner's (a worker's) resources; None takes every owner's
    of the installation, which is right for a single worker host or an admin's clean-up, not for
    workers on several hosts sharing an engine. Returns what was removed ("container NAME",
    "network NAME").
    """
    own_engine = engine is None
    engine = engine or connect_engine()
    removed: list[str] = []
    try:
        filters = _label_filters(owner_label_value, installation or default_installation())
        for container in engine.api.containers(all=True, filters=filters):
            labels = container.get("Labels") or {}
            if _held_by_live_process(labels):
                continue
            name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
            with contextlib.suppress(docker.errors.NotFound):
                try:
                    engine.api.remove_container(container["Id"], force=True)
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: already being removed
                        raise
                removed.append(f"container {name}")
        for network in engine.api.networks(filters=filters):
            labels = network.get("Labels") or {}
            if _held_by_live_process(labels):
                continue
            remove_network_when_empty(engine, network["Id"])
            removed.append(f"network {network['Name']}")
    finally:
        if own_engine:
            engine.close()
    return removed


def remove_surplus_egress_networks(
    *, installation: str | None = None, engine: Engine | None = None
) -> list[str]:
    """Remove the installation's egress bridges a creation race left beside the one in use, if
    nothing is on them.

    Workers racing to create the shared egress bridge may each make one (see
    `ensure_egress_network`); all but the oldest are surplus. One still holding a container (a
    session that started during the race) stays until a later run. Returns "network NAME" lines.
    """
    own_engine = engine is None
    engine = engine or connect_engine()
    removed: list[str] = []
    try:
        for network in surplus_egress_networks(engine, installation=installation):
            try:
                if engine.api.inspect_network(network["Id"]).get("Containers"):
                    continue
                engine.api.remove_network(network["Id"])
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if exc.status_code in (403, 409):  # a container joined it meanwhile: next time
                    continue
                raise
            removed.append(f"network {network['Name']}")
    finally:
        if own_engine:
            engine.close()
    return removed


@dataclass(frozen=True)
class SandboxContainer:
    name: str
    server_key: str
    role: str
    owner: str
    status: str
    image: str
    orphaned: bool


@dataclass(frozen=True)
class SandboxStatus:
    """What the sandbox has on the engine: for `manage.py sandbox status` and health pages."""

    engine: str
    images: dict[str, str | None]
    containers: list[SandboxContainer] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)


def sandbox_status(
    *, installation: str | None = None, engine: Engine | None = None
) -> SandboxStatus:
    """Images (shared by every installation on the engine), and the installation's containers
    and networks."""
    own_engine = engine is None
    engine = engine or connect_engine()
    ours = [
        f"{LABEL_MANAGED}=true",
        f"{LABEL_INSTALLATION}={installation or default_installation()}",
    ]
    try:
        images: dict[str, str | None] = {
            BASE_IMAGE: image_digest(engine, BASE_IMAGE),
            NODE_BASE_IMAGE: image_digest(engine, NODE_BASE_IMAGE),
        }
        for image in engine.api.images(filters={"label": f"{LABEL_ROLE}=proxy-image"}):
            for tag in image.get("RepoTags") or []:
                images[tag] = image["Id"]
        containers = [
            _describe(container)
            for container in engine.api.containers(all=True, filters={"label": ours})
        ]
        networks = [
            str(n["Name"])
            for n in engine.api.networks(filters={"label": ours})
            if (n.get("Labels") or {}).get(LABEL_ROLE) == ROLE_EGRESS_NETWORK
            or LABEL_SESSION in (n.get("Labels") or {})
        ]
        return SandboxStatus(
            engine=engine_version(engine), images=images, containers=containers, networks=networks
        )
    finally:
        if own_engine:
            engine.close()


def _describe(container: dict[str, Any]) -> SandboxContainer:
    labels = container.get("Labels") or {}
    return SandboxContainer(
        name=(container.get("Names") or ["?"])[0].lstrip("/"),
        server_key=labels.get(LABEL_SERVER, ""),
        role=labels.get(LABEL_ROLE, ""),
        owner=labels.get(LABEL_OWNER, ""),
        status=str(container.get("Status", "")),
        image=str(container.get("Image", "")),
        orphaned=not _held_by_live_process(labels),
    )
