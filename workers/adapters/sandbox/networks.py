"""The four network modes on the engine: the networks and the egress proxy container behind them.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import re
import secrets
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import docker.errors

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.errors import SandboxError
from workers.adapters.sandbox.spec import (
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_ROLE,
    NOBODY,
    default_installation,
    hardened_host_config,
)

EGRESS_NETWORK = "toolroom-egress"  # the prefix of the egress bridge's name
ROLE_EGRESS_NETWORK = "egress-network"
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


def ensure_egress_network(engine: Engine, *, installation: str | None = None) -> str:
    """The installation's shared egress bridge (created on first use); its ID.

    Docker does not keep network names unique (`check_duplicate` is best effort), so two workers
    creating the bridge at once may both succeed, and no container starts on a name two networks
    share ("network ... is ambiguous"). So each creation gets a name of its own, a network whose
    name is shared is never used, everyone takes the oldest of the rest, and the janitor removes
    the others once nothing is on them (`surplus_egress_networks`).
    """
    installation = installation or default_installation()
    usable = _unambiguous(egress_networks(engine, installation=installation))
    if not usable:
        engine.api.create_network(
            f"{EGRESS_NETWORK}-{secrets.token_hex(4)}",
            driver="bridge",
            check_duplicate=True,
            labels={
                LABEL_MANAGED: "true",
                LABEL_ROLE: ROLE_EGRESS_NETWORK,
                LABEL_INSTALLATION: installation,
            },
            options={"com.docker.network.bridge.enable_icc": "false"},
        )
        usable = _unambiguous(egress_networks(engine, installation=installation))
    if not usable:
        raise SandboxError("The sandbox's egress bridge network could not be created.")
    return str(usable[0]["Id"])


def egress_networks(engine: Engine, *, installation: str | None = None) -> list[dict[str, Any]]:
    """The installation's egress bridges on the engine, oldest first (normally exactly one)."""
    labels = [
        f"{LABEL_MANAGED}=true",
        f"{LABEL_ROLE}={ROLE_EGRESS_NETWORK}",
        f"{LABEL_INSTALLATION}={installation or default_installation()}",
    ]
    found = engine.api.networks(filters={"label": labels})
    return sorted(found, key=_creation_order)


def surplus_egress_networks(
    engine: Engine, *, installation: str | None = None
) -> list[dict[str, Any]]:
    """The installation's egress bridges other than the one `ensure_egress_network` hands out
    (left by a race)."""
    every = egress_networks(engine, installation=installation)
    usable = _unambiguous(every)
    return [n for n in every if not usable or n["Id"] != usable[0]["Id"]]


def _unambiguous(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Those whose name no other has (a race under the old fixed name could make two alike)."""
    names = Counter(str(n.get("Name")) for n in found)
    return [n for n in found if names[str(n.get("Name"))] == 1]


_CREATED = re.compile(r"^(?P<second>[^.]+?)(?:\.(?P<fraction>\d+))?(?P<zone>Z|[+-]\d\d:\d\d)$")


def _creation_order(network: Mapping[str, Any]) -> tuple[datetime, int, str]:
    """Sort key: the engine's creation time (RFC 3339 with up to 9 decimals), then the ID."""
    match = _CREATED.match(str(network.get("Created", "")))
    if match is None:
        return (datetime.max.replace(tzinfo=UTC), 0, str(network["Id"]))
    zone = "+00:00" if match["zone"] == "Z" else match["zone"]
    second = datetime.fromisoformat(match["second"] + zone)
    nanoseconds = int((match["fraction"] or "0").ljust(9, "0")[:9])
    return (second, nanoseconds, str(network["Id"]))


def proxy_command(allowlist: Sequence[str]) -> list[str]:
    # -E -s -S: no environment, no site packages, only the standard library and the program's own
    # directory (root's, read-only), where the network guard it imports lies beside it.
    command = [
        "python3",
        "-E",
        "-s",
        "-S",
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
) -> str:
    """The egress proxy of a proxied network, on the egress bridge (the caller connects it to
    the session's network, alias `PROXY_ALIAS`, before starting it)."""
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
    return str(created["Id"])


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
