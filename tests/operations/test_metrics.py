"""`/metrics`: Prometheus text for a bearer token or an allowed network only; catalogue requests
counted whoever answers them; the fleet's state read from the database at scrape time."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.utils import timezone

from registry.operations.metrics import CATALOGUE_REQUESTS, CatalogueMetrics
from registry.servers.models import DiscoveryRun, DiscoveryStatus
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db


def test_only_allowed_networks_and_the_token_may_read_it(client, settings):
    settings.TOOLROOM_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    settings.TOOLROOM_METRICS_TOKEN = "s3cret-metrics-token"

    assert client.get("/metrics").status_code == 404  # 127.0.0.1 is not in 10/8
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    # Through a proxy the address is only what headers claim: token only.
    assert (
        client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code
        == 404
    )
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 404
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def test_catalogue_requests_are_counted_with_status_and_cache_outcome():
    async def answered_degraded(scope, receive, send):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"x-toolroom-degraded", b"cache")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})

    async def run():
        async def receive():
            return {"type": "http.request"}

        async def send(message):
            pass

        scope = {"type": "http", "path": "/api/v1/catalogue", "query_string": b"format=mcp"}
        await CatalogueMetrics(answered_degraded)(scope, receive, send)

    counted = CATALOGUE_REQUESTS.labels("mcp", "200", "degraded")
    before = counted._value.get()
    asyncio.run(run())
    assert counted._value.get() == before + 1


def test_the_fleet_state_is_read_at_scrape_time(client):
    server = McpServerFactory(slug="stuck-one")
    DiscoveryRun.objects.create(
        server=server,
        trigger="test",
        requested_by="test",
        status=DiscoveryStatus.RUNNING,
        lease_until=timezone.now() - timedelta(seconds=5),
        attempts=1,
    )

    text = client.get("/metrics").content.decode()

    assert "toolroom_discovery_runs_stuck 1.0" in text
    assert 'toolroom_discovery_runs_24h{status="running"} 1.0' in text
    assert 'toolroom_component_ok{component="database"} 1.0' in text
    assert "toolroom_access_requests_pending 0.0" in text
    assert "toolroom_catalogue_requests_total" in text


def test_the_gateways_recent_calls_come_from_its_call_audit(client):
    from registry.gateway.models import CallOutcome, ToolCall

    now = timezone.now()

    def call(server, outcome, ms, *, minutes_ago=1):
        ToolCall.objects.create(
            started_at=now - timedelta(minutes=minutes_ago),
            duration_ms=ms,
            server_slug=server,
            name=f"{server}__echo",
            via="mcp",
            outcome=outcome,
        )

    call("files", CallOutcome.OK, 10.0)
    call("files", CallOutcome.OK, 30.0)
    call("files", CallOutcome.FAILED, 5000.0)
    call("files", CallOutcome.OK, 99999.0, minutes_ago=10)  # outside the window
    call("clock", CallOutcome.REFUSED, 1.0)

    text = client.get("/metrics").content.decode()

    assert 'toolroom_gateway_calls_5m{outcome="ok",server="files"} 2.0' in text
    assert 'toolroom_gateway_calls_5m{outcome="failed",server="files"} 1.0' in text
    assert 'toolroom_gateway_calls_5m{outcome="refused",server="clock"} 1.0' in text
    assert 'toolroom_gateway_call_milliseconds_avg_5m{server="files"} 1680.0' in text
    assert 'toolroom_gateway_call_milliseconds_max_5m{server="files"} 5000.0' in text


def test_per_tool_calls_and_latency_buckets_come_from_the_last_five_minutes(client):
    from registry.gateway.models import ToolCall

    now = timezone.now()
    for tool, outcome, ms, minutes_ago in [
        ("read", "ok", 3.0, 1),
        ("read", "ok", 40.0, 2),
        ("read", "failed", 700.0, 1),
        ("write", "ok", 12.0, 1),
        ("read", "ok", 1.0, 10),  # outside the window
    ]:
        ToolCall.objects.create(
            started_at=now - timedelta(minutes=minutes_ago),
            duration_ms=ms,
            server_slug="files",
            tool_name=tool,
            name=f"files__{tool}",
            via="mcp",
            outcome=outcome,
        )

    text = client.get("/metrics").content.decode()

    assert 'toolroom_gateway_tool_calls_5m{outcome="ok",server="files",tool="read"} 2.0' in text
    assert 'toolroom_gateway_tool_calls_5m{outcome="failed",server="files",tool="read"} 1.0' in text
    bucket = "toolroom_gateway_tool_call_milliseconds_5m_bucket"
    assert f'{bucket}{{le="5.0",server="files",tool="read"}} 1.0' in text
    assert f'{bucket}{{le="50.0",server="files",tool="read"}} 2.0' in text
    assert f'{bucket}{{le="+Inf",server="files",tool="read"}} 3.0' in text
    assert f'{bucket}{{le="25.0",server="files",tool="write"}} 1.0' in text
    assert (
        'toolroom_gateway_tool_call_milliseconds_5m_count{server="files",tool="read"} 3.0' in text
    )


def test_sandbox_containers_come_from_the_workers_heartbeats(client):
    from registry.core.models import ProcessHeartbeat
    from workers.heartbeat import sandbox_state

    seen = sandbox_state()  # the real engine the test machine runs (scripts/ensure-docker)
    assert seen["docker"] == "ok"
    assert seen["sandbox_containers"] >= 0
    now = timezone.now()
    for name, count in (("worker@a", 3), ("runtime@a", 3)):  # one owner, seen by two workers
        ProcessHeartbeat.objects.create(
            name=name,
            kind="worker",
            host="a",
            pid=1,
            started_at=now,
            beat_at=now,
            details={"docker": "ok", "sandbox_owner": "a", "sandbox_containers": count},
        )

    text = client.get("/metrics").content.decode()

    assert 'toolroom_sandbox_containers{owner="a"} 3.0' in text


def test_the_dashboard_and_alert_rules_use_only_metrics_toolroom_exposes(client):
    import json
    import re
    from pathlib import Path

    import yaml

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    rules = yaml.safe_load((deploy / "prometheus" / "alerts.yml").read_text())
    dashboard = json.loads((deploy / "grafana" / "toolroom-dashboard.json").read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    expressions += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {
        re.sub(r"_(bucket|total|sum|count)$", "", name)
        for expr in expressions
        for name in re.findall(r"toolroom_[a-z0-9_]+", expr)
    }

    text = client.get("/metrics").content.decode()
    exposed = {re.sub(r"_total$", "", name) for name in re.findall(r"^# TYPE (\S+)", text, re.M)}

    assert used
    assert used <= exposed, used - exposed
