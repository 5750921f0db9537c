"""Heartbeats of workers, runtime workers and beat: a daemon thread per process writes one row
every TOOLROOM_HEARTBEAT_SECONDS (`registry.core.readiness.process_heartbeat_record`), with what
the process sees of the Docker engine (workers) and the queues it consumes. `/readyz` and
`manage.py probe` read them; a heartbeat that fails (database blip) is retried at the next beat.
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

from registry.core.readiness import process_heartbeat_record

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def docker_engine_state() -> str:
    """'ok', 'not configured' (no DOCKER_HOST, no local socket), or what went wrong."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return "not configured"
    from workers.adapters.sandbox.engine import connect_engine  # noqa: PLC0415

    try:
        engine = connect_engine(timeout=3)
    except Exception as exc:
        return f"failing: {exc}"[:300]
    engine.close()
    return "ok"


def heartbeat_start(*, kind: str, name: str, details: Callable[[], dict[str, Any]]) -> None:
    """Start this process's heartbeat thread (once)."""
    global _thread  # noqa: PLW0603 (one per process)
    if _thread is not None and _thread.is_alive():
        return
    started_at = timezone.now()
    _stop.clear()

    def beat() -> None:
        while True:
            try:
                process_heartbeat_record(
                    kind=kind, name=name, started_at=started_at, details=details()
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
