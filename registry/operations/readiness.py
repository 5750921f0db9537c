"""Liveness and readiness of Toolroom: each component's state and the overall verdict.

More: docs/operations.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import ResponseError

from registry.core.cache import CACHE_ERRORS, cache_status, hot_cache
from registry.core.models import ProcessHeartbeat, ProcessKind
from registry.core.task_queue import BROKER_ERRORS, broker_failure_cause

OK, DEGRADED, FAILING = "ok", "degraded", "failing"
# What one probe query may take on PostgreSQL (a lock held by a migration, a stuck server)
# before its component says so, and what a whole report may take (components left when it is
# spent are reported unchecked): well under the 10 s of docker-compose.yml's health checks.
PROBE_STATEMENT_TIMEOUT_MS = 1000
PROBE_BUDGET_SECONDS = 5.0
PROBE_REDIS_TIMEOUT_SECONDS = 1.0


def process_heartbeat_record(
    *, kind: str, name: str, started_at: datetime, details: dict[str, Any]
) -> None:
    """This process is alive in this role: write its heartbeat (one upsert)."""
    ProcessHeartbeat.objects.update_or_create(
        name=name,
        kind=kind,
        defaults={
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


@contextlib.contextmanager
def probe_queries(*, timeout_ms: int = PROBE_STATEMENT_TIMEOUT_MS) -> Iterator[None]:
    """A savepoint whose queries may each take at most `timeout_ms` on PostgreSQL (the timeout
    in force before is put back after); elsewhere just the savepoint."""
    with transaction.atomic():
        if connection.vendor != "postgresql":
            yield
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), "
                "set_config('statement_timeout', %s, true)",
                [str(max(1, timeout_ms))],
            )
            before = cursor.fetchone()[0]
        yield
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])


def _timed(check: Any, *, deadline: float, database: bool = True) -> dict[str, Any]:
    started = time.monotonic()
    left_ms = int((deadline - started) * 1000)
    if left_ms < 50:
        return {
            "status": FAILING,
            "error": f"not checked: the probe's {PROBE_BUDGET_SECONDS:g} s went to the others",
            "latency_ms": 0.0,
        }
    try:
        if database:
            with probe_queries(timeout_ms=min(PROBE_STATEMENT_TIMEOUT_MS, left_ms)):
                result: dict[str, Any] = check()
        else:  # no query: not held up by a database that is away
            result = check()
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
    if url.startswith(("redis:", "rediss:")):
        # A frozen Redis accepts the connection and never answers: bound every read too.
        options = {
            **options,
            "socket_timeout": PROBE_REDIS_TIMEOUT_SECONDS,
            "socket_connect_timeout": PROBE_REDIS_TIMEOUT_SECONDS,
        }
    queues: dict[str, int] = {}
    try:
        with Connection(  # type: ignore[no-untyped-call]
            url, connect_timeout=PROBE_REDIS_TIMEOUT_SECONDS, transport_options=options
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=PROBE_REDIS_TIMEOUT_SECONDS)
            if url.startswith(("redis:", "rediss:")):
                client = conn.default_channel.client
                prefix = options.get("global_keyprefix", "")
                for name in settings.TOOLROOM_QUEUES_WATCHED:
                    queues[name] = int(client.llen(f"{prefix}{name}"))
                # A broker that reads but refuses writes (MISCONF on a full disk) takes no task.
                client.set(f"{prefix}toolroom-readyz", "1", ex=60)
    except ResponseError as exc:
        return {"status": FAILING, "error": broker_failure_cause(exc), "queues": queues}
    except BROKER_ERRORS as exc:
        if any(code in str(exc) for code in ("MISCONF", "READONLY", "OOM")):
            return {"status": FAILING, "error": broker_failure_cause(exc), "queues": queues}
        raise
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
    from registry.servers.jobs.discovery import discovery_runs_stuck  # noqa: PLC0415

    stuck = discovery_runs_stuck()
    return {"status": DEGRADED if stuck else OK, "stuck_runs": len(stuck)}


def _runtimes() -> dict[str, Any]:
    from registry.servers.gateway_policy import runtime_wanted_q  # noqa: PLC0415
    from registry.servers.jobs.runtime import runtime_display_state  # noqa: PLC0415
    from registry.servers.models import McpServer, ServerStatus  # noqa: PLC0415

    wanted = ServerStatus.objects.filter(
        server__in=McpServer.objects.filter(runtime_wanted_q()).values("pk")
    )
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
    deadline = time.monotonic() + PROBE_BUDGET_SECONDS
    components = {"database": _timed(_database, deadline=deadline)}
    database_ok = components["database"]["status"] == OK
    components["cache"] = _timed(_cache, deadline=deadline, database=False)
    components["broker"] = _timed(_broker, deadline=deadline, database=False)
    if database_ok:
        checks = {
            "workers": lambda: _heartbeats(ProcessKind.WORKER, required=True),
            "runtime_workers": lambda: _heartbeats(
                ProcessKind.RUNTIME, required=_runtime_workers_needed()
            ),
            "beat": lambda: _heartbeats(ProcessKind.BEAT, required=True),
            "docker": _docker,
            "discovery": _discovery,
            "runtimes": _runtimes,
        }
        for name, check in checks.items():
            components[name] = _timed(check, deadline=deadline)
    statuses = {component["status"] for component in components.values()}
    if not database_ok:
        overall = FAILING
    elif statuses == {OK}:
        overall = OK
    else:
        overall = DEGRADED
    return {"status": overall, "components": components}


def _runtime_workers_needed() -> bool:
    from registry.servers.gateway_policy import runtime_workers_needed  # noqa: PLC0415

    return runtime_workers_needed()
