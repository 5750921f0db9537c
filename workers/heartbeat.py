"""Heartbeats of workers, runtime workers and beat: a daemon thread per process writes one row
per role every TOOLROOM_HEARTBEAT_SECONDS (`readiness.process_heartbeat_record`), with what the
process sees of the Docker engine (workers) and the queues it consumes. `/readyz` and
`manage.py probe` read them; a heartbeat that fails (database blip) is retried at the next beat.

The roles are asked for at every beat, so a heartbeat says what the process still does: a
worker shutting down (for whatever reason) says nothing any more, and a runtime worker whose
runtime manager stopped answering stops heartbeating as a runtime worker (workers/lifecycle.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from registry.operations.readiness import process_heartbeat_record

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def sandbox_state() -> dict[str, Any]:
    """The Docker engine as this worker sees it: `docker` is 'ok', 'not configured' (no
    DOCKER_HOST, no local socket) or what went wrong; with an engine, how many sandbox containers
    (servers and their proxies) this worker's owner label has running."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return {"docker": "not configured"}
    from workers.adapters.sandbox.engine import connect_engine  # noqa: PLC0415
    from workers.adapters.sandbox.spec import (  # noqa: PLC0415
        LABEL_INSTALLATION,
        LABEL_MANAGED,
        LABEL_OWNER,
    )
    from workers.sandboxing import sandbox_installation, sandbox_owner  # noqa: PLC0415

    owner = sandbox_owner()
    try:
        engine = connect_engine(timeout=3)
        try:
            labels = [
                f"{LABEL_MANAGED}=true",
                f"{LABEL_INSTALLATION}={sandbox_installation()}",
                f"{LABEL_OWNER}={owner}",
            ]
            containers = len(engine.containers.list(filters={"label": labels}))
        finally:
            engine.close()
    except Exception as exc:  # reported, not raised: the heartbeat goes on
        return {"docker": f"failing: {exc}"[:300], "sandbox_owner": owner}
    return {"docker": "ok", "sandbox_owner": owner, "sandbox_containers": containers}


def heartbeat_start(
    *, roles: Callable[[], list[str]], name: str, details: Callable[[], dict[str, Any]]
) -> None:
    """Start this process's heartbeat thread (once): at each beat, a row for every role
    `roles()` names now (ProcessKind values)."""
    global _thread  # noqa: PLW0603 (one per process)
    if _thread is not None and _thread.is_alive():
        return
    started_at = timezone.now()
    _stop.clear()

    def beat() -> None:
        while True:
            try:
                kinds = roles()
                if kinds:
                    seen = details()
                    for kind in kinds:
                        process_heartbeat_record(
                            kind=kind, name=name, started_at=started_at, details=seen
                        )
            except Exception:
                logger.exception("heartbeat of %s not written; retrying in the next beat", name)
            finally:
                close_old_connections()
            if _stop.wait(settings.TOOLROOM_HEARTBEAT_SECONDS):
                return

    _thread = threading.Thread(target=beat, name="toolroom-heartbeat", daemon=True)
    _thread.start()


def heartbeat_stop() -> None:
    _stop.set()
