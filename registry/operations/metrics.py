"""Prometheus metrics at `/metrics`: request metrics counted in the web processes, and the state of
the fleet read from the database and the broker when Prometheus scrapes.

More: docs/operations.md, "Module notes"."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

CATALOGUE_PATH = "/api/v1/catalogue"

CATALOGUE_REQUESTS = Counter(
    "toolroom_catalogue_requests",
    "Catalogue requests by format, HTTP status and cache outcome (hit, miss, degraded, "
    "database, none).",
    ["format", "status", "cache"],
)
CATALOGUE_SECONDS = Histogram(
    "toolroom_catalogue_request_seconds",
    "Catalogue answer time by format.",
    ["format"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)


class CatalogueMetrics:
    """Counts and times `GET /api/v1/catalogue`, whoever answers it (fast path or Django)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != CATALOGUE_PATH:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, str] = {"status": "0", "cache": "none"}

        async def watching_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = str(message["status"])
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                if headers.get(b"x-toolroom-degraded") == b"database":
                    seen["cache"] = "database"  # the last confirmed state, database away
                elif b"x-toolroom-degraded" in headers:
                    seen["cache"] = "degraded"
                elif b"x-toolroom-cache" in headers:
                    seen["cache"] = headers[b"x-toolroom-cache"].decode("latin-1")
                elif seen["status"] == "304":
                    seen["cache"] = "hit"
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        finally:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            fmt = query.get("format", ["native"])[0]
            fmt = fmt if fmt in ("native", "mcp", "openai", "anthropic") else "other"
            CATALOGUE_REQUESTS.labels(fmt, seen["status"], seen["cache"]).inc()
            CATALOGUE_SECONDS.labels(fmt).observe(time.perf_counter() - started)


def catalogue_metrics(app: ASGIApp) -> ASGIApp:
    return CatalogueMetrics(app)


class FleetCollector(Collector):
    """The fleet's state, read from the database (and the broker) at scrape time."""

    def collect(self) -> Iterator[Metric]:
        from registry.operations.readiness import (  # noqa: PLC0415
            PROBE_STATEMENT_TIMEOUT_MS,
            probe_queries,
            readiness_report,
        )

        report = readiness_report()
        ready = GaugeMetricFamily(
            "toolroom_component_ok", "1 if the readiness component is ok.", labels=["component"]
        )
        for name, component in report["components"].items():
            ready.add_metric([name], 1.0 if component["status"] == "ok" else 0.0)
        yield ready
        queues = GaugeMetricFamily("toolroom_queue_depth", "Tasks waiting.", labels=["queue"])
        for name, depth in report["components"]["broker"].get("queues", {}).items():
            queues.add_metric([name], depth)
        yield queues
        # The rest reads the database, each query bounded like the probes' (a lock held by a
        # migration must not hang the scrape): what could not be read is left out and said so.
        failed = GaugeMetricFamily(
            "toolroom_scrape_failed",
            "1 if the fleet's state could not be read from the database at this scrape.",
        )
        try:
            with probe_queries(timeout_ms=PROBE_STATEMENT_TIMEOUT_MS * 3):
                fleet = list(self._fleet())
        except Exception:
            logger.exception("the fleet's metrics could not be read")
            failed.add_metric([], 1.0)
            yield failed
            return
        failed.add_metric([], 0.0)
        yield failed
        yield from fleet

    def _fleet(self) -> Iterator[Metric]:
        from registry.core.models import ProcessHeartbeat, ProcessKind  # noqa: PLC0415
        from registry.servers.gateway_policy import runtime_wanted_q  # noqa: PLC0415
        from registry.servers.jobs.discovery import discovery_runs_stuck  # noqa: PLC0415
        from registry.servers.jobs.runtime import runtime_display_state  # noqa: PLC0415
        from registry.servers.models import (  # noqa: PLC0415
            DiscoveryRun,
            McpServer,
            ReviewStatus,
            ServerStatus,
        )
        from registry.teams.models import AccessRequest  # noqa: PLC0415

        now = timezone.now()
        day_ago = now - timedelta(days=1)

        runs = GaugeMetricFamily(
            "toolroom_discovery_runs_24h", "Discovery runs requested in 24 h.", labels=["status"]
        )
        for status, count in (
            DiscoveryRun.objects.filter(requested_at__gte=day_ago)
            .values_list("status")
            .annotate(n=Count("pk"))
            .values_list("status", "n")
        ):
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily(
            "toolroom_discovery_runs_stuck",
            "Discovery runs nobody works on (the janitor recovers them).",
            value=len(discovery_runs_stuck()),
        )
        retried = DiscoveryRun.objects.filter(requested_at__gte=day_ago).exclude(recoveries=[])
        yield GaugeMetricFamily(
            "toolroom_discovery_runs_recovered_24h",
            "Discovery runs the janitor retried, resent or failed in 24 h.",
            value=retried.count(),
        )
        durations = GaugeMetricFamily(
            "toolroom_discovery_last_duration_seconds",
            "Duration of the last finished discovery per server.",
            labels=["server"],
        )
        latest: dict[str, float] = {}
        for slug, started, finished in (
            DiscoveryRun.objects.filter(finished_at__gte=day_ago, started_at__isnull=False)
            .order_by("finished_at")
            .values_list("server__slug", "started_at", "finished_at")
        ):
            if started is not None and finished is not None:
                latest[slug] = (finished - started).total_seconds()
        for slug, seconds in latest.items():
            durations.add_metric([slug], seconds)
        yield durations

        live = McpServer.objects.exclude(review_status=ReviewStatus.RETIRED)
        health = GaugeMetricFamily("toolroom_servers", "Servers by health.", labels=["health"])
        for state, count in (
            live.values_list("status__health")
            .annotate(n=Count("pk"))
            .values_list("status__health", "n")
        ):
            health.add_metric([state or "unknown"], count)
        yield health
        latency = GaugeMetricFamily(
            "toolroom_health_check_latency_ms", "Last health check latency.", labels=["server"]
        )
        failures = GaugeMetricFamily(
            "toolroom_health_checks_24h", "Health checks in 24 h.", labels=["server", "outcome"]
        )
        runtimes = GaugeMetricFamily(
            "toolroom_runtimes",
            "Runtimes wanted warm (auto-start, always warm, or demanded by recent calls) or held, "
            "by state (incl. owner lost).",
            labels=["state"],
        )
        restarts = GaugeMetricFamily(
            "toolroom_runtime_restarts", "Restarts of the current runtime.", labels=["server"]
        )
        by_state: dict[str, int] = {}
        wanted = set(McpServer.objects.filter(runtime_wanted_q()).values_list("pk", flat=True))
        recent = Q(health_samples__checked_at__gte=day_ago)
        for server in live.select_related("status").annotate(
            checks_ok=Count("health_samples", filter=recent & Q(health_samples__ok=True)),
            checks_failed=Count("health_samples", filter=recent & Q(health_samples__ok=False)),
        ):
            server_status: ServerStatus | None = getattr(server, "status", None)
            if server_status is not None and server_status.latency_ms is not None:
                latency.add_metric([server.slug], server_status.latency_ms)
            failures.add_metric([server.slug, "ok"], getattr(server, "checks_ok", 0))
            failures.add_metric([server.slug, "failed"], getattr(server, "checks_failed", 0))
            if server_status is not None and (server.pk in wanted or server_status.runtime_owner):
                state = runtime_display_state(server_status, now=now)
                by_state[state] = by_state.get(state, 0) + 1
                restarts.add_metric([server.slug], server_status.runtime_restarts)
        for state, count in by_state.items():
            runtimes.add_metric([state], count)
        yield latency
        yield failures
        yield runtimes
        yield restarts

        yield GaugeMetricFamily(
            "toolroom_access_requests_pending",
            "Access requests waiting for an admin.",
            value=AccessRequest.objects.pending().count(),
        )
        ages = GaugeMetricFamily(
            "toolroom_process_heartbeat_age_seconds",
            "Seconds since each worker, runtime worker and beat last wrote its heartbeat.",
            labels=["kind", "name"],
        )
        containers = GaugeMetricFamily(
            "toolroom_sandbox_containers",
            "Sandbox containers (servers and proxies) running per owner label, as its workers "
            "last saw them.",
            labels=["owner"],
        )
        alive = GaugeMetricFamily(
            "toolroom_processes_alive",
            "Workers, runtime workers and beat with a fresh heartbeat, by role (0: none).",
            labels=["kind"],
        )
        alive_by_kind = dict.fromkeys(ProcessKind.values, 0)
        by_owner: dict[str, int] = {}
        fresh = now - timedelta(seconds=settings.TOOLROOM_HEARTBEAT_STALE_SECONDS)
        for beat in ProcessHeartbeat.objects.filter(beat_at__gte=day_ago):
            ages.add_metric([beat.kind, beat.name], (now - beat.beat_at).total_seconds())
            if beat.beat_at >= fresh:
                alive_by_kind[beat.kind] = alive_by_kind.get(beat.kind, 0) + 1
            count = beat.details.get("sandbox_containers")
            if beat.beat_at >= fresh and isinstance(count, int):
                owner = str(beat.details.get("sandbox_owner", beat.host))
                by_owner[owner] = max(count, by_owner.get(owner, 0))
        for owner, count in by_owner.items():
            containers.add_metric([owner], count)
        for kind, count in alive_by_kind.items():
            alive.add_metric([kind], count)
        yield alive
        yield ages
        yield containers
        yield from _gateway_calls(now)
        yield from _quota_hits()
        yield from _notifications()


def _quota_hits() -> Iterator[Metric]:
    """Calls and session opens the gateway refused for a quota, by team and limit (a counter
    in Redis that every gateway process adds to; none without Redis)."""
    from registry.gateway.quotas import quota_hits  # noqa: PLC0415

    hits = CounterMetricFamily(
        "toolroom_gateway_quota_hits",
        "Requests the gateway refused for a quota (429 or an MCP error), by team and limit.",
        labels=["team", "limit"],
    )
    try:
        counted = quota_hits()
    except Exception:  # Redis out of reach: the rest of the scrape still stands
        logger.exception("the gateway's quota hits could not be read")
        counted = {}
    for (team, limit), count in sorted(counted.items()):
        hits.add_metric([team, limit], count)
    yield hits


def _notifications() -> Iterator[Metric]:
    """The notifications outbox per kind (email, webhook): what waits, what is due, the oldest
    waiting, what was given up."""
    from registry.notifications.services import notifications_backlog  # noqa: PLC0415

    pending = GaugeMetricFamily(
        "toolroom_notifications_pending",
        "Notifications not delivered yet (due now or waiting for a retry), by kind.",
        labels=["kind"],
    )
    due = GaugeMetricFamily(
        "toolroom_notifications_due",
        "Notifications due now that no worker is on, by kind (stays high: beat or workers down).",
        labels=["kind"],
    )
    oldest = GaugeMetricFamily(
        "toolroom_notifications_oldest_pending_seconds",
        "Age of the oldest notification not delivered yet, by kind (0: none).",
        labels=["kind"],
    )
    failed = GaugeMetricFamily(
        "toolroom_notifications_failed_24h",
        "Notifications given up in the last 24 hours, by kind.",
        labels=["kind"],
    )
    for kind, backlog in notifications_backlog().items():
        pending.add_metric([kind], backlog.pending)
        due.add_metric([kind], backlog.due)
        oldest.add_metric([kind], backlog.oldest_pending_seconds)
        failed.add_metric([kind], backlog.failed_24h)
    yield pending
    yield due
    yield oldest
    yield failed


GATEWAY_WINDOW = timedelta(minutes=5)


def _gateway_calls(now: Any) -> Iterator[Metric]:
    """The gateway's calls of the last five minutes, from its call audit (written in batches by
    every gateway process, so the scrape sees all of them without a shared directory)."""
    from registry.gateway.models import ToolCall  # noqa: PLC0415

    calls = GaugeMetricFamily(
        "toolroom_gateway_calls_5m",
        "Tool calls through the gateway in the last five minutes, by server and outcome.",
        labels=["server", "outcome"],
    )
    average = GaugeMetricFamily(
        "toolroom_gateway_call_milliseconds_avg_5m",
        "Average duration of the gateway's calls in the last five minutes, by server.",
        labels=["server"],
    )
    slowest = GaugeMetricFamily(
        "toolroom_gateway_call_milliseconds_max_5m",
        "Slowest gateway call in the last five minutes, by server.",
        labels=["server"],
    )
    rows = (
        ToolCall.objects.filter(started_at__gte=now - GATEWAY_WINDOW)
        .values("server_slug", "outcome")
        .annotate(count=Count("id"), total=Sum("duration_ms"), slowest=Max("duration_ms"))
        .order_by("server_slug", "outcome")
    )
    per_server: dict[str, tuple[int, float, float]] = {}
    for row in rows:
        server = row["server_slug"] or "(unknown)"
        calls.add_metric([server, row["outcome"]], row["count"])
        count, total, most = per_server.get(server, (0, 0.0, 0.0))
        per_server[server] = (
            count + row["count"],
            total + (row["total"] or 0.0),
            max(most, row["slowest"] or 0.0),
        )
    for server, (count, total, most) in per_server.items():
        average.add_metric([server], total / count if count else 0.0)
        slowest.add_metric([server], most)
    yield calls
    yield average
    yield slowest
    yield from _gateway_tool_calls(now)


def _gateway_tool_calls(now: Any) -> Iterator[Metric]:
    """Per tool, the same five minutes: calls by outcome, and their durations in the usage
    rollup's latency buckets (registry/gateway/models.py, `LATENCY_BUCKETS_MS`). Bounded labels:
    server and tool slugs of the registry (only tools called in the window appear), outcome (4
    values), le (13 values)."""
    from registry.gateway.models import BUCKET_FIELDS, LATENCY_BUCKETS_MS, ToolCall  # noqa: PLC0415
    from registry.gateway.usage import raw_bucket_counts  # noqa: PLC0415

    calls = GaugeMetricFamily(
        "toolroom_gateway_tool_calls_5m",
        "Tool calls through the gateway in the last five minutes, by server, tool and outcome.",
        labels=["server", "tool", "outcome"],
    )
    latency = HistogramMetricFamily(
        "toolroom_gateway_tool_call_milliseconds_5m",
        "Durations (ms) of the gateway's calls in the last five minutes, by server and tool "
        "(a window, not a running total: use histogram_quantile without rate()).",
        labels=["server", "tool"],
    )
    rows = (
        ToolCall.objects.filter(started_at__gte=now - GATEWAY_WINDOW)
        .values("server_slug", "tool_name", "outcome")
        .annotate(count=Count("id"), total=Sum("duration_ms"), **raw_bucket_counts())
        .order_by("server_slug", "tool_name", "outcome")
    )
    per_tool: dict[tuple[str, str], tuple[list[int], float]] = {}
    for row in rows:
        key = (row["server_slug"] or "(unknown)", row["tool_name"] or "(unknown)")
        calls.add_metric([*key, row["outcome"]], row["count"])
        buckets, total = per_tool.get(key, ([0] * len(BUCKET_FIELDS), 0.0))
        per_tool[key] = (
            [a + row[name] for a, name in zip(buckets, BUCKET_FIELDS, strict=True)],
            total + (row["total"] or 0.0),
        )
    bounds = [*(str(float(b)) for b in LATENCY_BUCKETS_MS), "+Inf"]
    for key, (buckets, total) in per_tool.items():
        running, cumulative = 0, []
        for bound, count in zip(bounds, buckets, strict=True):
            running += count
            cumulative.append((bound, float(running)))
        latency.add_metric(list(key), buckets=cumulative, sum_value=total)
    yield calls
    yield latency


def metrics_exposition() -> bytes:
    """The text exposition of every metric (summed over processes in multiprocess mode)."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(CATALOGUE_REQUESTS)
        registry.register(CATALOGUE_SECONDS)
    registry.register(FleetCollector())
    return generate_latest(registry)


def metrics_allowed(*, remote_addr: str, authorization: str, forwarded: bool) -> bool:
    """A matching bearer token, or a client address inside the allowed networks. A request that
    came through a proxy (`forwarded`: it carries X-Forwarded-For) is let in by token only: its
    address is whatever the headers claim."""
    token = settings.TOOLROOM_METRICS_TOKEN
    if token and authorization.startswith("Bearer "):
        given = authorization.removeprefix("Bearer ").strip()
        if hmac.compare_digest(given.encode(), token.encode()):
            return True
    if forwarded:
        return False
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(network, strict=False)
        for network in settings.TOOLROOM_METRICS_ALLOWED_NETWORKS
    )
