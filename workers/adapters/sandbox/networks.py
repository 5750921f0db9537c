"""The four network modes on the engine: the networks and the egress proxy container behind them.

- none: the container has a loopback interface only.
- internal: a network of its own, marked internal, whose bridge has no address on the host: the
  server reaches nothing, not even the host (Docker 20.10 lets an internal network reach the host's
  own addresses through its gateway; a bridge without an address has no gateway to use).
- proxied: the same internal network, plus an egress proxy container on it that is also on the
  shared egress bridge. The server is told the proxy's address in HTTP(S)_PROXY; the proxy lets
  through only the server's allowlist.
- bridge: the shared egress bridge (a user-defined bridge with inter-container traffic off):
  unrestricted egress, for tiers that may have it.

These functions call the engine synchronously; the transport runs them in worker threads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import docker.errors

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.spec import (
    LABEL_MANAGED,
    LABEL_ROLE,
    NOBODY,
    hardened_host_config,
)

EGRESS_NETWORK = "toolroom-egress"
PROXY_PORT = 3128
PROXY_ALIAS = "egress-proxy"
PROXY_MEMORY_MB = 64
PROXY_CPUS = 0.25
PROXY_PIDS = 64
# Names looked up inside internal and proxied containers go to the container's own loopback,
# where nothing answers, instead of being forwarded towards the host's resolver; a lookup fails
# within a second.
ISOLATED_DNS = ("127.0.0.1",)
ISOLATED_DNS_OPTIONS = ("timeout:1", "attempts:1")


def create_session_network(engine: Engine, name: str, labels: Mapping[str, str]) -> str:
    """An internal network for one session, with no address for the host on its bridge."""
    created = engine.api.create_network(
        name,
        driver="bridge",
        internal=True,
        check_duplicate=True,
        labels=dict(labels),
        options={
            "com.docker.network.bridge.inhibit_ipv4": "true",
            "com.docker.network.bridge.enable_ip_masquerade": "false",
        },
    )
    return str(created["Id"])


def ensure_egress_network(engine: Engine) -> str:
    """The shared egress bridge (created on first use); its ID."""
    existing = _egress_networks(engine)
    if not existing:
        try:
            engine.api.create_network(
                EGRESS_NETWORK,
                driver="bridge",
                check_duplicate=True,
                labels={LABEL_MANAGED: "true", LABEL_ROLE: "egress-network"},
                options={"com.docker.network.bridge.enable_icc": "false"},
            )
        except docker.errors.APIError as exc:
            # Another worker made it between the look and the create: use theirs.
            if exc.status_code != 409:
                raise
        existing = _egress_networks(engine)
    # Should a race leave two of the same name, everyone picks the same one.
    return str(sorted(existing, key=lambda n: (n.get("Created", ""), n["Id"]))[0]["Id"])


def _egress_networks(engine: Engine) -> list[dict[str, Any]]:
    found = engine.api.networks(
        names=[EGRESS_NETWORK], filters={"label": [f"{LABEL_ROLE}=egress-network"]}
    )
    return [n for n in found if n.get("Name") == EGRESS_NETWORK]


def proxy_command(allowlist: Sequence[str]) -> list[str]:
    command = [
        "python3",
        "-I",
        "/opt/toolroom/egress_proxy.py",
        "--listen",
        f"0.0.0.0:{PROXY_PORT}",
        "--lifeline-stdin",
    ]
    for entry in allowlist:
        command += ["--allow", entry]
    return command


def create_proxy_container(
    engine: Engine,
    *,
    image: str,
    name: str,
    allowlist: Sequence[str],
    labels: Mapping[str, str],
    egress_network_id: str,
    session_network_id: str,
) -> str:
    """The egress proxy for one session, on the egress bridge and the session's network."""
    host_config = engine.api.create_host_config(
        **hardened_host_config(
            memory_mb=PROXY_MEMORY_MB,
            cpus=PROXY_CPUS,
            pids_limit=PROXY_PIDS,
            read_only_root=True,
            tmpfs_mb=8,
            network_mode=egress_network_id,
        )
    )
    created = engine.api.create_container(
        image,
        command=proxy_command(allowlist),
        name=name,
        user=NOBODY,
        stdin_open=True,
        tty=False,
        labels=dict(labels),
        host_config=host_config,
        use_config_proxy=False,
    )
    proxy_id = str(created["Id"])
    engine.api.connect_container_to_network(proxy_id, session_network_id, aliases=[PROXY_ALIAS])
    return proxy_id


def container_address(engine: Engine, container_id: str, network_id: str) -> str:
    """The container's IPv4 address on the network `network_id`."""
    networks = engine.api.inspect_container(container_id)["NetworkSettings"]["Networks"]
    for settings in networks.values():
        if settings.get("NetworkID") == network_id and settings.get("IPAddress"):
            return str(settings["IPAddress"])
    raise LookupError(f"container {container_id[:12]} has no address on network {network_id[:12]}")


def proxy_environment(address: str) -> dict[str, str]:
    """What tells HTTP clients in the server's container to use the proxy (both spellings)."""
    url = f"http://{address}:{PROXY_PORT}"
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def remove_network_when_empty(engine: Engine, network_id: str, *, timeout: float = 10.0) -> None:
    """Remove a network, waiting (bounded) for containers removed a moment ago to detach."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            engine.api.remove_network(network_id)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
