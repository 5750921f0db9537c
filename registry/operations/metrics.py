"""Prometheus metrics at `/metrics`: request metrics counted in the web processes, and the state of
the fleet read from the database and the broker when Prometheus scrapes.

- **Counted in the web processes** (`toolroom_catalogue_requests_total`, `..._seconds`): by the
  ASGI wrapper `CatalogueMetrics`, around the fast path and Django alike. With
  `PROMETHEUS_MULTIPROC_DIR` set (the compose stack sets it for uvicorn's workers), every process
  writes its samples there and a scrape sums them (prometheus-client's multiprocess mode).
- **Read at scrape time** (`FleetCollector`): discovery runs and stuck runs, servers by health,
  last check latency and failures per server, warm runtimes by state and their restarts, queue
  depths, access requests waiting, heartbeats' ages, readiness per component, the gateway's calls
  of the last five minutes (from its call audit, which lags by the gateway's batch interval).
  What the workers and the gateway do is in the database already, so they need no endpoint of
  their own and no shared directory across containers.

Access: a bearer token (`TOOLROOM_METRICS_TOKEN`) or a client address within
`TOOLROOM_METRICS_ALLOWED_NETWORKS` (default: loopback only); anything else gets 404.
"""

from __future__ import annotations

import hmac
import ipaddress
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
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

CATALOGUE_PATH = "/api/v1/catalogue"

CATALOGUE_REQUESTS = Counter(
    "toolroom_catalogue_requests",
    "Catalogue requests by format, HTTP status and cache outcome (hit, miss, degraded, none).",
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
                if b"x-toolroom-degraded" in headers:
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
        from registry.core.models import ProcessHeartbeat  # noqa: PLC0415
        from registry.operations.readiness import readiness_report  # noqa: PLC0415
        from registry.servers.models import (  # noqa: PLC0415
            DiscoveryRun,
            McpServer,
            ReviewStatus,
            ServerStatus,
        )
        from registry.servers.operations.discovery import discovery_runs_stuck  # noqa: PLC0415
        from registry.servers.operations.runtime import runtime_display_state  # noqa: PLC0415
        from registry.teams.models import AccessRequest  # noqa: PLC0415

        now = timezone.now()
        day_ago = now - timedelta(days=1)

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
            "toolroom_runtimes", "Warm runtimes by state (incl. owner lost).", labels=["state"]
        )
        restarts = GaugeMetricFamily(
            "toolroom_runtime_restarts", "Restarts of the current runtime.", labels=["server"]
        )
        by_state: dict[str, int] = {}
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
            if server.auto_start and server_status is not None:
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
        by_owner: dict[str, int] = {}
        fresh = now - timedelta(seconds=settings.TOOLROOM_HEARTBEAT_STALE_SECONDS)
        for beat in ProcessHeartbeat.objects.filter(beat_at__gte=day_ago):
            ages.add_metric([beat.kind, beat.name], (now - beat.beat_at).total_seconds())
            count = beat.details.get("sandbox_containers")
            if beat.beat_at >= fresh and isinstance(count, int):
                owner = str(beat.details.get("sandbox_owner", beat.host))
                by_owner[owner] = max(count, by_owner.get(owner, 0))
        for owner, count in by_owner.items():
            containers.add_metric([owner], count)
        yield ages
        yield containers
        yield from _gateway_calls(now)


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
