"""Liveness and readiness of Toolroom: each component's state and the overall verdict.

`readiness_report()` checks the database, the cache (Redis, through the catalogue's circuit), the
broker (and its queue depths), the heartbeats of workers, runtime workers and beat, the Docker
engine as the workers see it, discovery runs that are stuck, and warm runtimes that failed or whose
worker is lost. Each component is `ok`,
`degraded` or `failing`; the overall verdict is `failing` when the database is (nothing works
without it), `degraded` when anything else is not ok (agents still get correct catalogues), else
`ok`. Heartbeats are written by the processes themselves (`process_heartbeat_record`).
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from registry.core.cache import CACHE_ERRORS, cache_status, hot_cache
from registry.core.models import ProcessHeartbeat, ProcessKind

OK, DEGRADED, FAILING = "ok", "degraded", "failing"


def process_heartbeat_record(
    *, kind: str, name: str, started_at: datetime, details: dict[str, Any]
) -> None:
    """This process is alive: write its heartbeat (one upsert)."""
    ProcessHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "kind": kind,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": started_at,
            "beat_at": timezone.now(),
            "details": details,
        },
    )


def process_heartbeat_fresh(*, kind: str, host: str | None = None) -> ProcessHeartbeat | None:
    """The freshest heartbeat of that kind (on that host), if within the stale time."""
    since = timezone.now() - timedelta(seconds=settings.TOOLROOM_HEARTBEAT_STALE_SECONDS)
    beats = ProcessHeartbeat.objects.filter(kind=kind, beat_at__gte=since)
    if host is not None:
        beats = beats.filter(host=host)
    return beats.order_by("-beat_at").first()


def _timed(check: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result: dict[str, Any] = check()
    except Exception as exc:
        result = {"status": FAILING, "error": f"{type(exc).__name__}: {exc}"[:300]}
    result["latency_ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def _database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"status": OK, "vendor": connection.vendor}


def _cache() -> dict[str, Any]:
    backend = hot_cache()
    circuit = dict(cache_status())
    try:
        backend.get("readyz-probe")
    except CACHE_ERRORS as exc:
        return {"status": DEGRADED, "error": str(exc)[:300], **circuit}
    status = DEGRADED if circuit["degraded"] else OK
    return {"status": status, **circuit}


def _broker() -> dict[str, Any]:
    from kombu.connection import Connection  # noqa: PLC0415

    url = settings.CELERY_BROKER_URL
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    with Connection(url, connect_timeout=1, transport_options=options) as conn:  # type: ignore[no-untyped-call]
        conn.ensure_connection(max_retries=1, timeout=1)
        queues: dict[str, int] = {}
        if url.startswith(("redis:", "rediss:")):
            client = conn.default_channel.client
            prefix = options.get("global_keyprefix", "")
            for name in settings.TOOLROOM_QUEUES_WATCHED:
                queues[name] = int(client.llen(f"{prefix}{name}"))
    return {"status": OK, "queues": queues}


def _heartbeats(kind: str, *, required: bool) -> dict[str, Any]:
    fresh = process_heartbeat_fresh(kind=kind)
    if fresh is None:
        last = ProcessHeartbeat.objects.filter(kind=kind).order_by("-beat_at").first()
        return {
            "status": DEGRADED if required else OK,
            "alive": 0,
            "last_seen": last.beat_at.isoformat() if last else None,
        }
    since = timezone.now() - timedelta(seconds=settings.TOOLROOM_HEARTBEAT_STALE_SECONDS)
    alive = ProcessHeartbeat.objects.filter(kind=kind, beat_at__gte=since)
    return {
        "status": OK,
        "alive": alive.count(),
        "last_seen": fresh.beat_at.isoformat(),
    }


def _docker() -> dict[str, Any]:
    """The engine as the workers see it (the web process has no access to it by design)."""
    since = timezone.now() - timedelta(seconds=settings.TOOLROOM_HEARTBEAT_STALE_SECONDS)
    seen = [
        beat.details.get("docker")
        for beat in ProcessHeartbeat.objects.filter(beat_at__gte=since).exclude(kind="beat")
    ]
    used = [state for state in seen if state and state != "not configured"]
    if not used:
        return {"status": OK, "engine": "not configured"}
    failing = [state for state in used if state != OK]
    return {"status": DEGRADED if failing else OK, "engine": failing[0] if failing else OK}


def _discovery() -> dict[str, Any]:
    from registry.servers.operations.discovery import discovery_runs_stuck  # noqa: PLC0415

    stuck = discovery_runs_stuck()
    return {"status": DEGRADED if stuck else OK, "stuck_runs": len(stuck)}


def _runtimes() -> dict[str, Any]:
    from registry.servers.models import ServerStatus  # noqa: PLC0415
    from registry.servers.operations.runtime import runtime_display_state  # noqa: PLC0415

    wanted = ServerStatus.objects.filter(server__auto_start=True)
    states = [runtime_display_state(status) for status in wanted]
    failed = states.count("failed")
    lost = states.count("owner lost")
    return {
        "status": DEGRADED if failed or lost else OK,
        "wanted": len(states),
        "failed": failed,
        "owner_lost": lost,
    }


def readiness_report() -> dict[str, Any]:
    """Every component's state and the overall verdict (see the module's docstring)."""
    components = {"database": _timed(_database)}
    database_ok = components["database"]["status"] == OK
    components["cache"] = _timed(_cache)
    components["broker"] = _timed(_broker)
    if database_ok:
        components["workers"] = _timed(lambda: _heartbeats(ProcessKind.WORKER, required=True))
        components["runtime_workers"] = _timed(
            lambda: _heartbeats(ProcessKind.RUNTIME, required=_warm_runtimes_wanted())
        )
        components["beat"] = _timed(lambda: _heartbeats(ProcessKind.BEAT, required=True))
        components["docker"] = _timed(_docker)
        components["discovery"] = _timed(_discovery)
        components["runtimes"] = _timed(_runtimes)
    statuses = {component["status"] for component in components.values()}
    if not database_ok:
        overall = FAILING
    elif statuses == {OK}:
        overall = OK
    else:
        overall = DEGRADED
    return {"status": overall, "components": components}


def _warm_runtimes_wanted() -> bool:
    from registry.servers.models import McpServer  # noqa: PLC0415

    return McpServer.objects.filter(auto_start=True).exists()
