"""OpenTelemetry traces, exported over OTLP/HTTP to a real receiver the tests start: a request to
the web process (a real uvicorn, configured only by the standard environment) and a gateway tool
call produce spans, and the upstream MCP server gets the call's `traceparent` in `_meta`."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest

from registry.core import tracing
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.jobs.runtime import runtime_request
from registry.servers.models import Tool
from tests.celery_worker import CeleryWorker
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway_helpers import (
    RunningGateway,
    discovered_http_server,
    gateway_client,
    text_of,
)
from tests.mcp_fixtures import free_port, scenario_argv, start_http_scenario, wait_for_port
from tests.otlp_receiver import OtlpReceiver
from workers.runtime import RuntimeManager

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
CLIENT_KIND = 3  # SPAN_KIND_CLIENT


@pytest.fixture
def receiver():
    running = OtlpReceiver()
    yield running
    running.stop()


def test_a_request_to_the_web_process_is_traced_and_joins_the_callers_trace(receiver, tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "test",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "toolroom-web",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    port = free_port()
    log = tmp_path / "web.log"
    with log.open("w") as output:
        web = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "registry.asgi:application", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, timeout=60)
        trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/healthz",
            headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            assert response.status == 200

        span = receiver.wait_for_span(
            lambda s: s.service == "toolroom-web" and s.kind == SERVER_KIND, what="the request"
        )
    finally:
        web.send_signal(signal.SIGTERM)
        web.wait(timeout=30)

    assert (span.trace_id, span.parent_span_id) == (trace_id, caller_span), log.read_text()
    assert receiver.paths[0] == "/v1/traces"


@pytest.fixture
def traced(receiver, monkeypatch):
    """Tracing on in this process (the gateway runs in a thread of it), exporting to `receiver`."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "toolroom-gateway")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    assert tracing.tracing_configure()
    yield receiver
    tracing.tracing_shutdown()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_a_gateway_tool_call_is_traced_and_its_traceparent_reaches_the_server(traced):
    upstream = start_http_scenario("--echo-meta")
    gateway = RunningGateway()
    try:
        server = discovered_http_server("traced", upstream.url)
        team = TeamFactory(slug="tracing")
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team).plain

        async def call() -> str:
            async with gateway_client(gateway.url, token) as client:
                result = await client.call_tool("traced__meta", {})
                return str(result.content[0].text)

        seen_meta = json.loads(anyio.run(call))
    finally:
        gateway.stop()
        upstream.stop()

    version, trace_id, span_id, flags = seen_meta["traceparent"].split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    client_span = traced.wait_for_span(lambda s: s.span_id == span_id, what="the upstream call")
    assert (client_span.name, client_span.kind) == ("mcp tools/call", CLIENT_KIND)
    assert client_span.trace_id == trace_id
    assert client_span.attributes["mcp.subject"] == "meta"
    gateway_span = traced.wait_for_span(
        lambda s: s.span_id == client_span.parent_span_id, what="the gateway's call"
    )
    assert gateway_span.name == "gateway tools/call"
    assert gateway_span.trace_id == trace_id
    assert gateway_span.service == "toolroom-gateway"
    assert gateway_span.attributes["toolroom.server"] == "traced"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_a_call_through_a_runtime_worker_continues_the_gateways_trace(traced):
    """A stdio server held warm by a runtime manager (in this process): the gateway's
    `traceparent` travels in the call to the runtime's private endpoint, and the runtime's span is
    the gateway span's child."""
    server = McpServerFactory(slug="local", command=scenario_argv("--echo-meta"))
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    server_gateway_policy_set(
        actor="test", server=server, isolation_scope="shared", call_deadline_seconds=60
    )
    team = TeamFactory(slug="tracing")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain
    runtime_request(server=server, action="start", actor="test")
    manager = RuntimeManager("tracing@host", heartbeat_seconds=0.5)
    manager.start()
    gateway = RunningGateway()
    try:
        assert manager.command(server.pk, "start") == "running"

        async def call() -> str:
            async with gateway_client(gateway.url, token) as client:
                return text_of(await client.call_tool("local__meta", {}))

        seen_meta = json.loads(anyio.run(call))
    finally:
        gateway.stop()
        manager.shutdown()

    _, trace_id, span_id, _ = seen_meta["traceparent"].split("-")
    runtime_span = traced.wait_for_span(lambda s: s.span_id == span_id, what="the runtime's call")
    assert (runtime_span.name, runtime_span.trace_id) == ("mcp tools/call", trace_id)
    gateway_span = traced.wait_for_span(
        lambda s: s.span_id == runtime_span.parent_span_id, what="the gateway's call"
    )
    assert (gateway_span.name, gateway_span.trace_id) == ("gateway tools/call", trace_id)


@pytest.mark.workers
@pytest.mark.django_db(transaction=True)
def test_a_task_is_traced_where_it_is_sent_and_where_a_worker_runs_it(traced, tmp_path):
    """The discovery a new server asks for: sent from this process, run by a real Celery worker
    that exports to the same receiver; the run and its MCP requests are in the sender's trace."""
    log = tmp_path / "worker.log"
    worker = CeleryWorker(
        log,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": traced.url,
            "OTEL_SERVICE_NAME": "toolroom-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    try:
        server_services.server_create(
            actor="test",
            slug="sent",
            name="Sent",
            transport="stdio",
            command=scenario_argv(),
            trust_tier="builtin",
        )
        sent = traced.wait_for_span(
            lambda s: s.name == "apply_async/toolroom.discover_server", what="the send"
        )
        # (The worker may also run a discovery an earlier test left queued: another trace.)
        run = traced.wait_for_span(
            lambda s: s.name == "run/toolroom.discover_server" and s.trace_id == sent.trace_id,
            what="the run in the sender's trace",
            timeout=60,
        )
        listed = traced.wait_for_span(
            lambda s: s.name == "mcp tools/list" and s.trace_id == sent.trace_id,
            what="the discovery's tools/list in the task's trace",
            timeout=60,
        )
    finally:
        worker.stop()

    assert sent.service == "toolroom-gateway"  # this test process's name (the fixture's)
    assert (run.service, listed.service) == ("toolroom-worker", "toolroom-worker")
