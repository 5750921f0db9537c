"""Health checks as the control plane sees them: which servers are due, and recording outcomes.

Each server has its own policy (interval, timeout, failure threshold). A check that fails moves
the server to degraded, and to unhealthy (circuit open) once failures reach the threshold; the
next check backs off exponentially with jitter. A success closes the circuit. Every outcome is
kept in a bounded history, from which the admin shows uptime.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Field, Q
from django.utils import timezone

from registry.audit.services import Actor, audit_record
from registry.core import task_queue
from registry.core.secret_fields import secret_redact
from registry.servers.jobs.drift import tool_definitions_drift
from registry.servers.jobs.runtime import runtime_live_owner
from registry.servers.models import (
    CircuitState,
    Health,
    HealthSample,
    McpServer,
    ReviewStatus,
    ServerStatus,
)
from registry.servers.signals import announce_visibility_change

# Servers whose health matters: the ones agents may use, and the ones being vetted.
CHECKED_STATUSES = (ReviewStatus.APPROVED, ReviewStatus.PENDING_REVIEW, ReviewStatus.SUSPENDED)
MAX_BACKOFF = timedelta(hours=1)
HISTORY_PER_SERVER = 500


@dataclass(frozen=True)
class HealthResult:
    server_id: int
    ok: bool
    latency_ms: float | None = None
    error: str = ""
    checked_at: datetime | None = None
    # The tools the probe listed (every probe lists them), compared with the approved
    # definitions (`tool_definitions_drift`); None: not listed.
    tools: list[dict[str, Any]] | None = None


def _jitter(seconds: float) -> timedelta:
    # Spread checks so a fleet registered at once does not stay in lock-step.
    return timedelta(seconds=seconds * random.uniform(0.9, 1.1))  # noqa: S311


def health_claim_due(*, now: datetime | None = None, limit: int = 5000) -> list[int]:
    """Claim the servers whose check is due, moving their next check past this sweep.

    Claims are taken under row locks (skipped where another sweep holds them), so two sweeps
    never check the same server twice.
    """
    now = now or timezone.now()
    with transaction.atomic():
        due = list(
            ServerStatus.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(server__review_status__in=CHECKED_STATUSES)
            .filter(Q(next_check_at__isnull=True) | Q(next_check_at__lte=now))
            .order_by("next_check_at")
            .values_list("server_id", "server__health_check_timeout_seconds")[:limit]
        )
        if not due:
            return []
        # Until the result arrives, the next check is one timeout plus a margin away; a lost
        # batch is therefore retried soon, not never.
        longest = max(timeout for _, timeout in due)
        ServerStatus.objects.filter(server_id__in=[pk for pk, _ in due]).update(
            next_check_at=now + timedelta(seconds=2 * longest + 30)
        )
    return [pk for pk, _ in due]


# A check that waited in the queue longer than this is dropped: a newer sweep claims it again.
CHECK_EXPIRES_SECONDS = 60.0


def health_dispatch(*, server_ids: list[int], on_commit: bool = False) -> None:
    """Send checks to the workers: warm servers to the worker holding them (probed through the
    warm session), the rest in bounded batches to any worker."""
    send = task_queue.enqueue if on_commit else task_queue.send_now
    warm: dict[str, list[int]] = {}
    cold: list[int] = []
    statuses = ServerStatus.objects.filter(server_id__in=server_ids).only(
        "server_id", "runtime_owner", "runtime_heartbeat_at"
    )
    owners = {status.server_id: runtime_live_owner(status) for status in statuses}
    for pk in server_ids:
        owner = owners.get(pk, "")
        if owner:
            warm.setdefault(owner, []).append(pk)
        else:
            cold.append(pk)
    for owner, ids in warm.items():
        send(
            task_queue.RUNTIME_PROBE_BATCH, args=[ids], worker=owner, expires=CHECK_EXPIRES_SECONDS
        )
    size = settings.TOOLROOM_HEALTH_BATCH_SIZE
    for start in range(0, len(cold), size):
        send(
            task_queue.HEALTH_CHECK_BATCH,
            args=[cold[start : start + size]],
            expires=CHECK_EXPIRES_SECONDS,
        )


def health_request(*, servers: list[McpServer], actor: Actor) -> None:
    """Check these servers now (the admin's "Check health now")."""
    ids = [server.pk for server in servers]
    with transaction.atomic():
        health_dispatch(server_ids=ids, on_commit=True)
    for server in servers:
        audit_record(
            actor=actor,
            action="server.health_check_requested",
            target=server,
            server=server,
            summary=f"Asked for a health check of {server.name}.",
        )


def _wanted(server: McpServer, now: datetime) -> bool:
    """Whether the gateway wants the server now: a call asked for it (on demand) or its calls
    failed (the gateway opened the circuit), within the demand's time."""
    from registry.servers.gateway_policy import ServerGatewayPolicy  # noqa: PLC0415

    return ServerGatewayPolicy.objects.filter(server=server, demanded_until__gt=now).exists()


def _next_state(
    status: ServerStatus, server: McpServer, result: HealthResult, now: datetime
) -> tuple[str, timedelta]:
    interval = server.health_check_interval_seconds
    if result.ok:
        status.consecutive_failures = 0
        status.last_healthy_at = now
        status.circuit_state = CircuitState.CLOSED
        status.circuit_opened_at = None
        slow = (
            result.latency_ms is not None
            and result.latency_ms > settings.TOOLROOM_HEALTH_DEGRADED_LATENCY_MS
        )
        return (Health.DEGRADED if slow else Health.HEALTHY), _jitter(interval)
    status.consecutive_failures += 1
    failures = status.consecutive_failures
    backoff = min(timedelta(seconds=interval * 2 ** (failures - 1)), MAX_BACKOFF)
    if _wanted(server, now):
        # Calls want it (the gateway recorded demand): find out soon that it is back.
        backoff = min(backoff, timedelta(seconds=settings.TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS))
    if failures >= server.health_failure_threshold:
        if status.circuit_state != CircuitState.OPEN:
            status.circuit_opened_at = now
        status.circuit_state = CircuitState.OPEN
        return Health.UNHEALTHY, _jitter(backoff.total_seconds())
    return Health.DEGRADED, _jitter(backoff.total_seconds())


@transaction.atomic
def health_record(*, results: Iterable[HealthResult]) -> list[int]:
    """Record a batch of check outcomes; returns the servers whose health state changed."""
    results = list(results)
    if not results:
        return []
    now = timezone.now()
    # Only the status rows are locked (`of`): the joined server rows are read, not locked. A
    # FOR UPDATE over the join also locked the servers' rows, in whatever order the join
    # produced them, and deadlocked with discovery_record, which locks the server, then its
    # status (PostgreSQL; seen in the worker end-to-end test).
    statuses = {
        s.server_id: s
        for s in ServerStatus.objects.select_for_update(of=("self",))
        .select_related("server")
        .filter(server_id__in=[r.server_id for r in results])
    }
    changed: list[tuple[ServerStatus, str, str]] = []
    samples: list[HealthSample] = []
    for result in results:
        status = statuses.get(result.server_id)
        if status is None:
            continue  # the server was deleted meanwhile
        checked_at = result.checked_at or now
        before = status.health
        health, wait = _next_state(status, status.server, result, checked_at)
        status.health = health
        status.last_checked_at = checked_at
        status.latency_ms = result.latency_ms
        error = secret_redact(result.error, status.server.secret_values()) if result.error else ""
        status.last_error = error[:5000] if not result.ok else ""
        status.next_check_at = checked_at + wait
        samples.append(
            HealthSample(
                server_id=result.server_id,
                checked_at=checked_at,
                ok=result.ok,
                latency_ms=result.latency_ms,
                error=error[:500],
            )
        )
        if before != health:
            changed.append((status, before, health))
    _write_statuses(list(statuses.values()), now=now)
    HealthSample.objects.bulk_create(samples, batch_size=500)
    for status, before, after in changed:
        # Degraded <-> healthy flapping is not an admin decision; only record what agents see.
        if Health.UNHEALTHY in (before, after) or before == Health.UNKNOWN:
            audit_record(
                actor="worker:health",
                action="server.health_changed",
                target=status.server,
                server=status.server,
                summary=f"{status.server.name} is {after} (was {before})"
                + (f": {status.last_error.splitlines()[0][:200]}" if status.last_error else "."),
                before={"health": before},
                after={"health": after},
            )
    changed_ids = [status.server_id for status, _, _ in changed]
    announce_visibility_change(server_ids=changed_ids, reason="server.health_changed")
    listed: list[tuple[int, list[dict[str, Any]]]] = [
        (r.server_id, r.tools) for r in results if r.ok and r.tools is not None
    ]
    if listed:  # after the statuses are written: the drift check takes its own locks
        transaction.on_commit(lambda: _drift_check(listed), robust=True)
    return changed_ids


def _drift_check(listed: list[tuple[int, list[dict[str, Any]]]]) -> None:
    for server_id, tools in listed:
        tool_definitions_drift(server_id=server_id, tools=tools)


_RECORDED_FIELDS = (
    "health",
    "last_checked_at",
    "last_healthy_at",
    "latency_ms",
    "last_error",
    "consecutive_failures",
    "circuit_state",
    "circuit_opened_at",
    "next_check_at",
    "updated_at",
)


def _write_statuses(statuses: list[ServerStatus], *, now: datetime) -> None:
    """Write what a batch of checks changed: one plain UPDATE per row, sent with executemany.

    Django's bulk_update builds one CASE WHEN per field over the whole batch; for a batch of 100
    statuses that cost 100-200 ms of CPU, more than the checks themselves (bench/health_sweep).
    """
    if not statuses:
        return
    meta = ServerStatus._meta
    fields = [cast("Field[Any, Any]", meta.get_field(name)) for name in _RECORDED_FIELDS]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    pk_column = quote(meta.pk.column)
    # Identifiers come from the model's own metadata; every value is a parameter.
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {pk_column} = %s"  # noqa: S608
    rows = []
    for status in statuses:
        status.updated_at = now
        values = [
            field.get_db_prep_save(getattr(status, field.attname), connection) for field in fields
        ]
        rows.append([*values, status.pk])
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def health_history_prune(*, keep: int = HISTORY_PER_SERVER) -> int:
    """Keep the newest `keep` samples of every server; returns how many were deleted."""
    deleted = 0
    crowded = (
        HealthSample.objects.values("server_id")
        .annotate(n=Count("id"))
        .filter(n__gt=keep)
        .values_list("server_id", flat=True)
    )
    for server_id in crowded:
        cutoff = (
            HealthSample.objects.filter(server_id=server_id)
            .order_by("-checked_at", "-id")
            .values_list("checked_at", flat=True)[keep - 1 : keep]
        )
        if cutoff:
            count, _ = HealthSample.objects.filter(
                server_id=server_id, checked_at__lt=cutoff[0]
            ).delete()
            deleted += count
    return deleted


@dataclass(frozen=True)
class Uptime:
    samples: int
    ok: int

    @property
    def percent(self) -> float | None:
        return round(100 * self.ok / self.samples, 2) if self.samples else None


def server_uptime(*, server_id: int, since: datetime | None = None) -> Uptime:
    samples = HealthSample.objects.filter(server_id=server_id)
    if since is not None:
        samples = samples.filter(checked_at__gte=since)
    counts = samples.aggregate(total=Count("id"), ok=Count("id", filter=Q(ok=True)))
    return Uptime(samples=counts["total"] or 0, ok=counts["ok"] or 0)
