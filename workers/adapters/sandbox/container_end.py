"""How a sandboxed server's container ended (exit code, OOM kill), and removing it (blocking)."""

from __future__ import annotations

import contextlib
import time

import docker.errors

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.errors import SandboxError


def read_fate(
    engine: Engine, container_id: str, *, since: float, timeout: float
) -> tuple[int | None, bool]:
    """(exit code, OOM killed) from the engine's events: they outlive an auto-removed container.

    Waits up to `timeout` for the container to die (0: only what already happened).
    """
    exit_code: int | None = None
    oom = False
    events = engine.api.events(
        since=int(since) - 60,
        until=int(time.time() + timeout) + 1,
        filters={"container": container_id, "type": "container"},
        decode=True,
    )
    try:
        for event in events:
            action = str(event.get("Action") or event.get("status") or "")
            if action == "oom":
                oom = True
            elif action == "die":
                code = event.get("Actor", {}).get("Attributes", {}).get("exitCode")
                exit_code = int(code) if code is not None else None
                break
    finally:
        events.close()
    if exit_code is None or not oom:
        # Not removed yet (or events missed): the container's own record says it too.
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            state = engine.api.inspect_container(container_id)["State"]
            if not state.get("Running"):
                oom = oom or bool(state.get("OOMKilled"))
                if exit_code is None:
                    exit_code = int(state.get("ExitCode"))
    return exit_code, oom


def remove_container(engine: Engine, container_id: str, *, timeout: float) -> None:
    """Kill and remove the container, and wait until the engine no longer has it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            engine.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            # 409: auto-remove is already removing it.
            if exc.status_code != 409:
                raise
        try:
            engine.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        if time.monotonic() > deadline:
            raise SandboxError(f"The engine did not remove container {container_id[:12]}.")
        time.sleep(0.05)
