"""Quotas at the gateway (issue 26, medium 2): one team at its limits of open sessions and calls a
minute gets 429 with Retry-After (or an MCP error naming the limit) while another team keeps full
service; the count is shared by two real gateway processes through a real Redis; hits show in
/metrics and in the audit; a concurrent-call lease is given back after a timeout, an upstream
failure and a refusal, and a dead process's leases lapse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import MCPError

from registry.audit.models import AuditEvent
from registry.gateway.models import ToolCall
from registry.gateway.quotas import team_quota_set
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import Transport
from registry.teams.callers import PersonIdentity, PersonStanding
from registry.teams.tokens import token_authenticate
from tests.celery_worker import database_url
from tests.conftest import CATALOGUE_REDIS_URL
from tests.factories import (
    AgentTokenFactory,
    GrantFactory,
    McpServerFactory,
    TeamFactory,
    ToolFactory,
)
from tests.gateway_helpers import RunningGateway, discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import free_port, http_scenario_server, wait_for_port  # noqa: F401
from tests.waiting import wait_for
from workers.gateway import quotas as quotas_module
from workers.gateway.quotas import QUOTA_ERROR_CODE, QuotaRefused, Quotas

REPO = Path(__file__).resolve().parents[2]
HANDSHAKE = "2025-11-25"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "quota-test", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"

pytestmark = [pytest.mark.django_db(transaction=True)]


class GatewayProcess:
    """`uvicorn workers.gateway.asgi:application` on the test database and the test's Redis
    prefix (what `make run` and the compose stack start), its own process."""

    def __init__(self, prefix: str, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "registry.settings",
            "TOOLROOM_PROFILE": "test",
            "DATABASE_URL": database_url(),
            "REDIS_URL": CATALOGUE_REDIS_URL,
            "TOOLROOM_CACHE_PREFIX": prefix,
            "TOOLROOM_GATEWAY_JOURNAL_DIR": "",
        }
        argv = [sys.executable, "-m", "uvicorn", "workers.gateway.asgi:application"]
        with log.open("a") as output:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port), "--no-proxy-headers"],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, timeout=60)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _open_session(base: str, token: str) -> httpx2.Response:
    return httpx2.post(
        f"{base}/mcp",
        json=INITIALIZE,
        headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT},
        timeout=30,
    )


def _close_session(base: str, token: str, session_id: str) -> int:
    answer = httpx2.delete(
        f"{base}/mcp",
        headers={
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session_id,
            "Mcp-Protocol-Version": HANDSHAKE,
        },
        timeout=30,
    )
    return answer.status_code


def _rest_call(base: str, token: str, name: str = "nowhere__tool") -> httpx2.Response:
    return httpx2.post(
        f"{base}/api/v1/tools/{name}/call",
        json={"arguments": {}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _prefix(redis_cache: Any, settings: Any) -> str:
    return str(settings.CACHES["default"]["KEY_PREFIX"])


def _not_near_a_minute_boundary() -> None:
    """Calls a minute are counted per clock minute: start a burst early enough in one."""
    second = time.time() % 60
    if second > 45:
        time.sleep(61 - second)


@pytest.mark.processes
def test_team_b_keeps_full_service_while_team_a_is_at_its_limits_across_two_gateways(
    redis_cache, settings, committed, tmp_path, client
):
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    a_token = AgentTokenFactory(team=alpha).plain
    b_token = AgentTokenFactory(team=beta).plain
    with committed():
        team_quota_set(actor="test", team=alpha, sessions_per_team=2, calls_per_minute_per_team=4)
    log = tmp_path / "gateways.log"
    first = GatewayProcess(_prefix(redis_cache, settings), log)
    second = GatewayProcess(_prefix(redis_cache, settings), log)
    try:
        # Team A: one session on each gateway process fills its limit of two...
        opened = [_open_session(first.base, a_token), _open_session(second.base, a_token)]
        assert [answer.status_code for answer in opened] == [200, 200], log.read_text()[-3000:]
        # ...and a third is refused on either process, however many times A tries.
        for base in [first.base, second.base] * 10:
            refused = _open_session(base, a_token)
            assert refused.status_code == 429
            assert int(refused.headers["Retry-After"]) >= 1
            error = refused.json()["error"]
            assert error["code"] == QUOTA_ERROR_CODE
            assert error["data"]["limit"] == "sessions_per_team"
            assert "the team's limit of 2 open sessions" in error["message"]
        # Team B meanwhile: every session and every call it makes is served.
        b_sessions = [_open_session(base, b_token) for base in [first.base, second.base] * 3]
        assert [answer.status_code for answer in b_sessions] == [200] * 6
        assert "mcp-session-id" in b_sessions[0].headers

        # Calls a minute, counted by both processes together: 2 + 2, then refused.
        _not_near_a_minute_boundary()
        admitted = [_rest_call(base, a_token) for base in (first.base, first.base, second.base)]
        admitted.append(_rest_call(second.base, a_token))
        assert [answer.status_code for answer in admitted] == [404] * 4  # no such tool: checked
        for base in (first.base, second.base):
            over = _rest_call(base, a_token)
            assert over.status_code == 429, over.text
            assert 1 <= int(over.headers["Retry-After"]) <= 60
            assert over.json()["error"]["code"] == "quota_exceeded"
            assert "calls_per_minute_per_team" in over.json()["error"]["message"]
        # Through the web app's REST endpoint (forwarded to a gateway): the same 429, and when.
        settings.TOOLROOM_GATEWAY_INTERNAL_URL = first.base
        forwarded = client.post(
            "/api/v1/tools/nowhere__tool/call",
            data={"arguments": {}},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {a_token}",
        )
        assert forwarded.status_code == 429
        assert 1 <= int(forwarded["Retry-After"]) <= 60
        b_calls = [_rest_call(base, b_token) for base in [first.base, second.base] * 5]
        assert [answer.status_code for answer in b_calls] == [404] * 10

        # A session A closes on one process frees its place for a session on the other.
        session_id = opened[0].headers["mcp-session-id"]
        assert _close_session(first.base, a_token, session_id) == 200
        assert _open_session(second.base, a_token).status_code == 200
        assert _open_session(first.base, a_token).status_code == 429

        # The hits are in /metrics (by team and limit) and in the audit.
        metrics = client.get("/metrics").content.decode()
        sessions_hits = re.search(
            r'toolroom_gateway_quota_hits_total\{limit="sessions_per_team",team="alpha"\} (\S+)',
            metrics,
        )
        assert sessions_hits is not None
        assert float(sessions_hits.group(1)) == 21.0
        assert re.search(
            r'toolroom_gateway_quota_hits_total\{limit="calls_per_minute_per_team",team="alpha"\}'
            r" 3.0",
            metrics,
        )
        assert 'team="beta"' not in "".join(
            line for line in metrics.splitlines() if "quota_hits" in line
        )
        wait_for(
            lambda: ToolCall.objects.filter(error_class="quota_exceeded").count() == 3,
            what="the refused calls in the call audit",
            log=log,
        )
        events = AuditEvent.objects.filter(action="gateway.quota_exceeded", target_id=alpha.pk)
        # Once a minute per caller and limit, not once per hit.
        assert sorted(event.details["limit"] for event in events) == [
            "calls_per_minute_per_team",
            "sessions_per_team",
        ]
    finally:
        first.stop()
        second.stop()


@pytest.fixture
def echo(http_scenario_server, team):  # noqa: F811 (the fixture imported above)
    server = discovered_http_server("echo", http_scenario_server.url)
    GrantFactory(team=team, server=server)
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=0.5)
    return server


async def _leases(redis_cache: Any, settings: Any, token_id: int) -> int:
    """The caller's calls in flight as Redis counts them, once the gateway's releases went out
    (within FLUSH_SECONDS of the call's end)."""
    await anyio.sleep(quotas_module.FLUSH_SECONDS * 4)
    prefix = _prefix(redis_cache, settings)
    return int(redis_cache.zcard(f"{prefix}:gateway-quota:calls:token:{token_id}"))


@pytest.mark.processes
def test_a_concurrent_call_lease_is_given_back_after_timeouts_failures_and_refusals(
    redis_cache, settings, committed, team, echo
):
    agent = AgentTokenFactory(team=team)
    # A server nobody listens on: every call fails upstream.
    gone = McpServerFactory(
        slug="gone",
        transport=Transport.STREAMABLE_HTTP,
        url=f"http://127.0.0.1:{free_port()}/mcp",
        command=[],
    )
    server_services.server_submit_for_review(actor="test", server=gone)
    server_services.server_approve(actor="test", server=gone)
    server_services.tool_approve(actor="test", tool=ToolFactory(server=gone, name="echo"))
    server_gateway_policy_set(actor="test", server=gone, call_deadline_seconds=0.5)
    GrantFactory(team=team, server=gone)
    with committed():
        team_quota_set(actor="test", team=team, concurrent_calls_per_caller=1)
    gateway = RunningGateway()

    async def run() -> list[Any]:
        seen: list[Any] = []
        async with gateway_client(gateway.url, agent.plain) as client:
            timed_out = await client.call_tool("echo__sleep", {"seconds": 3})
            seen.append(
                ("timeout", timed_out.is_error, await _leases(redis_cache, settings, agent.pk))
            )
            failed = await client.call_tool("gone__echo", {"value": "x"})
            seen.append(
                ("failure", failed.is_error, await _leases(redis_cache, settings, agent.pk))
            )
            refused = await client.call_tool("echo__add", {"a": "not a number"})
            seen.append(
                ("refusal", refused.is_error, await _leases(redis_cache, settings, agent.pk))
            )

            # One call in flight holds the caller's only place: a second one at the same time
            # is refused with an MCP error naming the limit, and the next one is served.
            async def slow() -> None:
                seen.append(
                    ("slow", text_of(await client.call_tool("echo__sleep", {"seconds": 0.3})))
                )

            async with anyio.create_task_group() as group:
                group.start_soon(slow)
                await anyio.sleep(0.1)
                try:
                    await client.call_tool("echo__echo", {"text": "hi"})
                except MCPError as exc:
                    seen.append(("busy", exc.error.code, exc.error.message))
            answered = await client.call_tool("echo__echo", {"text": "hi"})
            seen.append(
                ("after", text_of(answered), await _leases(redis_cache, settings, agent.pk))
            )
        return seen

    try:
        seen = anyio.run(run)
    finally:
        gateway.stop()
    assert seen[:3] == [("timeout", True, 0), ("failure", True, 0), ("refusal", True, 0)]
    busy = next(entry for entry in seen if entry[0] == "busy")
    assert busy[1] == QUOTA_ERROR_CODE
    assert "concurrent_calls_per_caller" in busy[2]
    assert "this caller's limit of 1 concurrent calls" in busy[2]
    assert ("slow", "slept") in seen
    assert seen[-1] == ("after", "hi", 0)


def _person(person_id: int, authorization_id: int, team_id: int) -> PersonIdentity:
    return PersonIdentity(
        token_id=authorization_id * 10,
        person_id=person_id,
        person_name=f"person-{person_id}",
        team_id=team_id,
        role_id=1,
        client_id=authorization_id,
        client_name=f"app-{authorization_id}",
        authorization_id=authorization_id,
        expires_at=None,
        standing=PersonStanding(True, True, True, True),
    )


def test_a_person_is_counted_across_their_apps_and_a_dead_process_lease_lapses(
    redis_cache, settings, committed, team, monkeypatch
):
    with committed():
        team_quota_set(actor="test", team=team, sessions_per_caller=1)

    async def run() -> list[str]:
        quotas = Quotas()
        seen = []
        lease = await quotas.session_open(_person(7, 1, team.pk), None)
        assert lease is not None
        try:  # the same person through another app: the person's one session is taken
            await quotas.session_open(_person(7, 2, team.pk), None)
        except QuotaRefused as exc:
            seen.append(exc.limit)
        # Another person of the team is not held back by the first.
        other = await quotas.session_open(_person(8, 3, team.pk), None)
        seen.append("other" if other is not None else "none")
        # The process holding the first lease dies (it never releases nor renews it): the
        # lease lapses after LEASE_SECONDS and the person may open a session again.
        quotas.held.clear()
        await quotas.redis.zadd(lease.keys[0], {lease.member: time.time() - 1})
        again = await quotas.session_open(_person(7, 2, team.pk), None)
        seen.append("again" if again is not None else "none")
        await quotas.close()
        return seen

    assert anyio.run(run) == ["sessions_per_caller", "other", "again"]


def test_without_redis_one_process_counts_alone(settings, committed, team):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with committed():
        team_quota_set(actor="test", team=team, calls_per_minute_per_caller=2)
    identity = token_authenticate(AgentTokenFactory(team=team).plain)

    async def run() -> list[str]:
        quotas = Quotas()
        assert quotas.redis is None
        seen = []
        for _ in range(3):
            try:
                async with quotas.call(identity, None):
                    seen.append("ok")
            except QuotaRefused as exc:
                seen.append(exc.limit)
        return seen

    _not_near_a_minute_boundary()
    assert anyio.run(run) == ["ok", "ok", "calls_per_minute_per_caller"]
    assert quotas_module.LEASE_SECONDS > quotas_module.REFRESH_SECONDS * 2
