"""The connection to the Docker engine: one place that makes a client and explains a missing engine.

The `docker` SDK negotiates the API version with the engine ("auto"), so Debian's Docker 20.10
(API 1.41) and newer engines both work. The engine is found the usual way (DOCKER_HOST, else the
local socket); put a socket proxy in front of it in production (see docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from typing import Any

import docker
import docker.errors

from workers.adapters.sandbox.errors import EngineUnavailableError, SandboxError

# The SDK has no type hints; this alias names what is passed around.
Engine = Any

DEFAULT_TIMEOUT = 60.0


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect_engine(
    *, base_url: str | None = None, api_version: str = "auto", timeout: float = DEFAULT_TIMEOUT
) -> Engine:
    """A client of the engine at `base_url` (default: DOCKER_HOST or the local socket).

    Raises EngineUnavailableError, worded for an admin, when nothing answers.
    """
    address = base_url or engine_address()
    try:
        if base_url is None:
            client = docker.from_env(version=api_version, timeout=int(timeout))
        else:
            client = docker.DockerClient(
                base_url=base_url, version=api_version, timeout=int(timeout)
            )
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(
            f"No Docker engine answers at {address} ({exc}). Start one with scripts/ensure-docker, "
            "or point DOCKER_HOST at the engine (or at the socket proxy in front of it)."
        ) from exc
    return client


def engine_version(engine: Engine) -> str:
    """'Docker 20.10.24 (API 1.41)': for status pages and error messages."""
    info = engine.version()
    return f"Docker {info.get('Version', '?')} (API {info.get('ApiVersion', '?')})"


def container_attach_socket(
    engine: Engine, container_id: str, *, stdin: bool, blocking: bool
) -> socket.socket:
    """The attach connection (stdout, stderr, and stdin if asked) of a created container, as a
    plain socket this process owns. Attached before start, nothing of the container's output is
    buffered in the HTTP layer."""
    params = {"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1}
    raw = engine.api.attach_socket(container_id, params=params)
    sock = getattr(raw, "_sock", raw)
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        with contextlib.suppress(Exception):
            raw.close()
        raise SandboxError(
            "The engine is reached over TLS or SSH, where the sandbox cannot attach to a "
            "container's stdio; reach it through its unix socket or a plain TCP socket proxy."
        )
    owned = sock.dup()
    with contextlib.suppress(Exception):
        raw.close()
    with contextlib.suppress(Exception):
        sock.close()
    owned.setblocking(blocking)
    return owned
