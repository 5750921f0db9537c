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
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server, gateway_client
from tests.mcp_fixtures import free_port, start_http_scenario, wait_for_port
from tests.otlp_receiver import OtlpReceiver

REPO = Path(__file__).resolve().parent.parent
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
