"""A recovered server is served again without waiting for a health check (issue 30, item 4): the
shared circuit's half-open probe, one real call across two real gateway processes once the open
time has passed, whose success closes the circuit for both (no health worker runs here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError

from registry.audit.models import AuditEvent
from registry.gateway.services import server_circuit_trip, server_gateway_policy_set
from registry.servers.models import CircuitState, Health, ServerStatus
from tests.celery_worker import database_url
from tests.factories import AgentTokenFactory, GrantFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import free_port, start_http_scenario, wait_for_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

REPO = Path(__file__).resolve().parents[2]
OPEN_SECONDS = 2.0


class GatewayProcess:
    """`uvicorn workers.gateway.asgi:application` on the test's database and Redis prefix, with
    a short circuit open time."""

    def __init__(self, settings: Any, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        cache = settings.CACHES["default"]
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "registry.settings",
            "TOOLROOM_PROFILE": "test",
            "DATABASE_URL": database_url(),
            "REDIS_URL": cache["LOCATION"],
            "TOOLROOM_CACHE_PREFIX": cache["KEY_PREFIX"],
            "TOOLROOM_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
            "TOOLROOM_GATEWAY_JOURNAL_DIR": "",
            "TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS": str(OPEN_SECONDS),
        }
        argv = [sys.executable, "-m", "uvicorn", "workers.gateway.asgi:application"]
        with log.open("a") as output:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port), "--log-level", "warning"],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, timeout=90)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def gateways(settings, redis_cache, tmp_path):
    log = tmp_path / "gateways.log"
    first = GatewayProcess(settings, log)
    try:
        second = GatewayProcess(settings, log)
    except BaseException:
        first.stop()
        raise
    yield first, second
    first.stop()
    second.stop()


@pytest.fixture
def flaky(team):
    """A server discovered while it ran, then stopped (the test brings it back on its port)."""
    port = free_port()
    running = start_http_scenario(port=port)
    try:
        server = discovered_http_server("flaky", f"http://127.0.0.1:{port}/mcp")
    finally:
        running.stop()
    GrantFactory(team=team, server=server)
    return server, port


def _code(result: Any) -> str:
    if not result.is_error:
        return "ok"
    return str(result.meta["toolroom/error"]["code"])


async def _call(client: Any, name: str, arguments: dict[str, Any]) -> str:
    try:
        return _code(await client.call_tool(name, arguments))
    except MCPError as error:  # not expected: say what it was
        return f"mcp-error: {error}"


def test_a_recovered_server_is_served_by_both_gateways_after_one_probe_call(
    gateways, team, flaky, tmp_path
):
    first, second = gateways
    server, port = flaky
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=0.5)
    token = AgentTokenFactory(team=team).plain
    arrivals = tmp_path / "arrivals.txt"
    seen: dict[str, Any] = {"second": [], "first": []}

    async def run() -> None:
        async with (
            gateway_client(first.url, token) as one,
            gateway_client(second.url, token) as two,
        ):
            # The server is dead: the first gateway's calls fail until it opens the circuit.
            for _ in range(10):
                await _call(one, "flaky__echo", {"text": "x"})
                circuit = await anyio.to_thread.run_sync(_circuit)
                if circuit == CircuitState.OPEN:
                    break
            assert circuit == CircuitState.OPEN
            # Calls keep coming on the second gateway; the server stays dead past one open time
            # (a probe fails: open for another open time), then comes back.
            dead_until = time.monotonic() + OPEN_SECONDS + 1.0
            while time.monotonic() < dead_until:
                seen["second"].append(("dead", await _call(two, "flaky__echo", {"text": "x"})))
                await anyio.sleep(0.1)
            running = start_http_scenario("--arrivals", str(arrivals), port=port)
            try:
                recovered = time.monotonic()
                while time.monotonic() - recovered < 20:
                    code = await _call(two, "flaky__echo", {"text": "x"})
                    seen["second"].append(("back", code))
                    if code == "ok":
                        seen["second_served"] = time.monotonic() - recovered
                        break
                    await anyio.sleep(0.1)
                while time.monotonic() - recovered < 20:
                    code = await _call(one, "flaky__echo", {"text": "x"})
                    seen["first"].append(code)
                    if code == "ok":
                        seen["first_served"] = time.monotonic() - recovered
                        break
                    await anyio.sleep(0.1)
            finally:
                running.stop()

    def _circuit() -> str:
        return ServerStatus.objects.get(server=server).circuit_state

    anyio.run(run)

    print(
        f"recovery -> served: second gateway {seen.get('second_served')} s, "
        f"first gateway {seen.get('first_served')} s; second's calls: {seen['second']}"
    )
    assert "second_served" in seen, seen["second"]
    # At most one open time (the failed probe's) plus the calls' own time; the wanted health
    # backoff (15 s) never came into it: no health worker runs.
    assert seen["second_served"] < OPEN_SECONDS + 2.0
    # While the server was dead: refused fast, with one real call (a failed probe) per open time.
    dead = [code for moment, code in seen["second"] if moment == "dead"]
    assert set(dead) <= {"circuit_open", "upstream_unreachable"}, dead
    assert 1 <= dead.count("upstream_unreachable") <= 2, dead
    # The other gateway is served at once: the probe closed the circuit for it too.
    assert seen["first"] == ["ok"]
    assert seen["first_served"] < seen["second_served"] + 1.0
    # The probe was the only call that reached the server before the circuit closed.
    assert len(arrivals.read_text().splitlines()) == 2  # the probe, then the first gateway's
    status = ServerStatus.objects.get(server=server)
    assert (status.circuit_state, status.health) == (CircuitState.CLOSED, Health.HEALTHY)
    assert AuditEvent.objects.filter(action="server.circuit_closed", server=server).count() == 1


def test_concurrent_callers_on_two_gateways_make_exactly_one_probe(gateways, team, flaky, tmp_path):
    first, second = gateways
    server, port = flaky
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=10)
    token = AgentTokenFactory(team=team).plain
    arrivals = tmp_path / "arrivals.txt"
    running = start_http_scenario("--arrivals", str(arrivals), port=port)  # back at once
    outcome: dict[str, Any] = {}

    async def run() -> None:
        async with (
            gateway_client(first.url, token) as a1,
            gateway_client(first.url, token) as a2,
            gateway_client(first.url, token) as a3,
            gateway_client(first.url, token) as a4,
            gateway_client(second.url, token) as b1,
            gateway_client(second.url, token) as b2,
            gateway_client(second.url, token) as b3,
            gateway_client(second.url, token) as b4,
        ):
            clients = [a1, a2, a3, a4, b1, b2, b3, b4] * 2  # 16 callers, 8 on each gateway
            # The circuit opens (as a gateway's failed calls open it). Before the open time:
            # refused on both gateways, nothing reaches the server.
            tripped = partial(server_circuit_trip, server_id=server.pk, error="connection refused")
            assert await anyio.to_thread.run_sync(tripped)
            outcome["early"] = [
                await _call(client, "flaky__echo", {"text": "x"}) for client in clients[:8]
            ]
            await anyio.sleep(OPEN_SECONDS + 0.5)
            codes: list[str] = []

            async def one(client: Any) -> None:
                codes.append(await _call(client, "flaky__sleep", {"seconds": 3}))

            async with anyio.create_task_group() as group:
                for client in clients:
                    group.start_soon(one, client)
            outcome["together"] = codes
            outcome["after"] = [
                text_of(await client.call_tool("flaky__echo", {"text": "y"})) for client in (a1, b1)
            ]

    try:
        anyio.run(run)
    finally:
        running.stop()

    assert outcome["early"] == ["circuit_open"] * 8
    assert sorted(outcome["together"]) == ["circuit_open"] * 15 + ["ok"]
    reached = arrivals.read_text().splitlines()
    assert [line.split()[1] for line in reached] == ["sleep", "echo", "echo"]
    assert outcome["after"] == ["y", "y"]
    assert ServerStatus.objects.get(server=server).circuit_state == CircuitState.CLOSED
