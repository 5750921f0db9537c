"""Gateway replicas without sticky sessions: two real gateway processes (uvicorn, as `make run`
serves them) behind a real HAProxy in round robin, SDK clients in both protocol generations.

A handshake session (2025-11-25, `Mcp-Session-Id`) opened through one replica goes on through
either; one replica is killed with SIGKILL mid-run and restarted, and every call of every session
still succeeds, without a single "Session not found"; the private-data ratchet still holds in the
session; a DELETE through one replica ends the session on both; an id that was never issued, one
tampered with, one presented by another token, or one idle past its time is refused by both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from registry.servers.models import McpServer
from tests.celery_worker import database_url
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, text_of
from tests.load_balancer import LoadBalancer
from tests.mcp_fixtures import (
    free_port,
    http_scenario_server,  # noqa: F401 (a fixture)
    start_http_scenario,
    wait_for_port,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

REPO = Path(__file__).resolve().parents[2]
SESSIONS = 4
CALLS_PER_SESSION = 250  # 1,000 calls in all
LEGACY = "2025-11-25"


class Replica:
    """`uvicorn workers.gateway.asgi:application` on the test's database and cache."""

    def __init__(self, env: dict[str, str], folder: Path, name: str, port: int = 0) -> None:
        self.env = env
        self.folder = folder
        self.name = name
        self.port = port or free_port()
        self.log = folder / f"gateway-{name}.log"
        self.start()

    def start(self) -> None:
        argv = [sys.executable, "-m", "uvicorn", "workers.gateway.asgi:application"]
        argv += ["--port", str(self.port), "--log-level", "warning"]
        with self.log.open("a") as output:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=self.env, stdout=output, stderr=subprocess.STDOUT
            )
        wait_for_port(self.port, timeout=90)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def replica_env(settings: Any, folder: Path, **extra: str) -> dict[str, str]:
    cache = settings.CACHES["default"]
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "test",
        "DATABASE_URL": database_url(),
        "REDIS_URL": cache["LOCATION"],
        "TOOLROOM_CACHE_PREFIX": cache["KEY_PREFIX"],
        "TOOLROOM_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        "TOOLROOM_GATEWAY_JOURNAL_DIR": "",
        **extra,
    }


@pytest.fixture
def world(tmp_path, redis_cache):
    """Team alpha granted `echo` (confidential data) and `web` (a tool that reaches the open
    internet: the ratchet refuses it once a conversation read confidential data)."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(
        json.dumps(
            [
                {
                    "name": "echo",
                    "description": "Send a text anywhere on the internet.",
                    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                    "annotations": {"openWorldHint": True},
                }
            ]
        )
    )
    echo = start_http_scenario()
    web = start_http_scenario("--tools-file", str(tools_file))
    try:
        alpha = TeamFactory(slug="alpha")
        private = discovered_http_server("echo", echo.url)
        McpServer.objects.filter(pk=private.pk).update(data_sensitivity="confidential")
        GrantFactory(team=alpha, server=private)
        GrantFactory(team=alpha, server=discovered_http_server("web", web.url))
        yield {
            "team": alpha.pk,
            "token": AgentTokenFactory(team=alpha).plain,
            "other": AgentTokenFactory(team=alpha).plain,
        }
    finally:
        echo.stop()
        web.stop()


class Wire:
    """The HTTP client under an SDK client: every status it got, and the session id."""

    def __init__(self, token: str) -> None:
        self.statuses: list[int] = []
        self.session_id = ""

        async def seen(response: httpx2.Response) -> None:
            self.statuses.append(response.status_code)
            self.session_id = response.headers.get("mcp-session-id", self.session_id)

        self.http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(60.0),
            event_hooks={"response": [seen]},
        )

    def client(self, url: str, mode: str) -> Client:
        return Client(streamable_http_client(url, http_client=self.http), mode=mode)


def raw_post(url: str, token: str, session_id: str) -> int:
    """A `tools/list` on the session, straight to one replica or through the balancer."""
    answer = httpx2.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session_id,
            "MCP-Protocol-Version": LEGACY,
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
        trust_env=False,
    )
    return answer.status_code


def raw_initialize(url: str, token: str) -> str:
    """A handshake session opened with plain HTTP (no GET stream, unlike the SDK client)."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    params = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    answer = httpx2.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
        headers=headers,
        timeout=30,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    session_id = answer.headers["mcp-session-id"]
    notified = httpx2.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": LEGACY},
        timeout=30,
        trust_env=False,
    )
    assert notified.status_code == 202
    return str(session_id)


def streams_of(replica: Replica) -> int:
    """The handshake GET streams the replica holds (its /healthz)."""
    answer = httpx2.get(f"http://127.0.0.1:{replica.port}/healthz", timeout=10, trust_env=False)
    return int(answer.json()["streams"])


def bump(team_id: int) -> None:
    """A change to the team's catalogue (what a grant, an approval or a revoke does)."""
    from django.db import close_old_connections

    from registry.catalogue.versions import catalogue_versions_bump

    try:
        catalogue_versions_bump(team_ids=[team_id], reason="test")
    finally:
        close_old_connections()


def test_handshake_sessions_go_on_across_replicas_through_a_kill_and_a_restart(
    world, tmp_path, settings
):
    env = replica_env(settings, tmp_path)
    replicas = [Replica(env, tmp_path, "a"), Replica(env, tmp_path, "b")]
    balancer = LoadBalancer([replica.port for replica in replicas], tmp_path)
    wires = [Wire(world["token"]) for _ in range(SESSIONS)]
    killed, restarted = anyio.Event(), anyio.Event()
    paused: list[int] = []
    ratchet: list[str] = []
    told: list[str] = []
    held: list[Replica] = []  # the replica holding the watching session's GET stream

    async def session(index: int, wire: Wire) -> list[str]:
        texts = []
        async with wire.client(balancer.url, "legacy") as client:
            assert client.protocol_version == LEGACY
            for call in range(CALLS_PER_SESSION):
                if call in {CALLS_PER_SESSION // 3, 2 * CALLS_PER_SESSION // 3}:
                    paused.append(index)  # the kill (then the restart) happens between calls
                    await (killed if call == CALLS_PER_SESSION // 3 else restarted).wait()
                result = await client.call_tool("echo__echo", {"text": f"{index}-{call}"})
                assert result.is_error is False, text_of(result)
                texts.append(text_of(result))
            if index == 0:  # the confidential reads happened on both replicas, before and after
                refused = await client.call_tool("web__echo", {"text": "leak"})
                ratchet.append(refused.meta["toolroom/error"]["code"] if refused.is_error else "ok")
        return texts

    async def on_message(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            told.append(message.method)

    async def until(condition: Any, what: str) -> None:
        with anyio.fail_after(120):
            while not condition():
                await anyio.sleep(0.05)

    async def watching(opened: anyio.Event) -> None:
        """A session that listed the tools and waits to be told of changes."""
        wire = Wire(world["token"])
        transport = streamable_http_client(balancer.url, http_client=wire.http)
        async with Client(transport, mode="legacy", message_handler=on_message) as client:
            await client.list_tools()
            opened.set()
            await restarted.wait()
            await until(lambda: len(told) >= 2, "told of the change while its replica was down")
            assert (await client.list_tools()).tools  # and it still lists, on any replica

    async def operator(opened: anyio.Event, located: anyio.Event) -> None:
        await opened.wait()
        for _ in range(200):
            found = [
                replica
                for replica in replicas
                if await anyio.to_thread.run_sync(streams_of, replica)
            ]
            if found:
                held.extend(found[:1])
                break
            await anyio.sleep(0.1)
        target = held[0]
        located.set()  # the other sessions open now: their GET streams land anywhere
        await anyio.to_thread.run_sync(bump, world["team"])
        await until(lambda: len(told) >= 1, "told of a change")
        await until(lambda: len(paused) >= SESSIONS, "every session paused")
        await anyio.to_thread.run_sync(target.kill)  # with the watching session's GET stream
        await anyio.to_thread.run_sync(bump, world["team"])  # while that stream has no replica
        killed.set()
        await until(lambda: len(paused) >= 2 * SESSIONS, "every session paused again")
        await anyio.to_thread.run_sync(target.start)
        await anyio.to_thread.run_sync(balancer.wait_up, 2)
        restarted.set()

    results: dict[int, list[str]] = {}

    async def run() -> None:
        async def one(index: int) -> None:
            results[index] = await session(index, wires[index])

        opened, located = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(watching, opened)
            group.start_soon(operator, opened, located)
            await located.wait()
            for index in range(SESSIONS):
                group.start_soon(one, index)

    try:
        balancer.wait_up(2)
        before = balancer.answered()
        anyio.run(run)
        after = balancer.answered()
        modern = anyio.run(_modern_calls, balancer.url, world["token"])
    finally:
        balancer.stop()
        for replica in replicas:
            replica.stop()

    for index in range(SESSIONS):
        assert results[index] == [f"{index}-{call}" for call in range(CALLS_PER_SESSION)]
        assert 404 not in wires[index].statuses, "a request got Session not found"
    assert len({wire.session_id for wire in wires}) == SESSIONS
    assert ratchet == ["private_data_ratchet"]
    assert len(told) >= 2  # no list_changed lost, though the stream's replica was killed
    # Both replicas answered many requests of these sessions (round robin, no stickiness).
    served = {name: after[name] - before.get(name, 0) for name in after}
    assert min(served.values()) > CALLS_PER_SESSION, served
    assert modern == ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"]


async def _modern_calls(url: str, token: str) -> list[str]:
    """2026-07-28 calls through the balancer: no session to carry."""
    wire = Wire(token)
    async with wire.client(url, "auto") as client:
        return [text_of(await client.call_tool("echo__echo", {"text": f"m{n}"})) for n in range(10)]


def test_a_session_ends_and_expires_on_every_replica_and_forged_ids_are_refused(
    world, tmp_path, settings
):
    idle = 3
    env = replica_env(settings, tmp_path, TOOLROOM_GATEWAY_IDLE_SECONDS=str(idle))
    first, second = Replica(env, tmp_path, "a"), Replica(env, tmp_path, "b")
    balancer = LoadBalancer([first.port, second.port], tmp_path)
    direct = [f"http://127.0.0.1:{replica.port}/mcp" for replica in (first, second)]
    token = world["token"]

    async def open_call_close(keep: list[str]) -> None:
        wire = Wire(token)
        async with wire.client(balancer.url, "legacy") as client:
            await client.call_tool("echo__echo", {"text": "hi"})
            keep.append(wire.session_id)
            # While it lives, either replica serves it, for its own token only.
            keep.extend(
                str(raw_post(url, who, wire.session_id))
                for url in direct
                for who in (token, world["other"])
            )
        # The client's exit sent DELETE through the balancer, to one replica.

    try:
        balancer.wait_up(2)
        seen: list[str] = []
        anyio.run(open_call_close, seen)
        session_id, *live = seen
        ended = [raw_post(url, token, session_id) for url in direct]
        tampered = session_id[:-1] + ("0" if session_id[-1] != "0" else "1")
        forged = [raw_post(url, token, tampered) for url in direct]
        forged += [raw_post(url, token, uuid.uuid4().hex) for url in direct]

        # A session that no one uses (no request, no GET stream) past the idle time is gone.
        idle_id = raw_initialize(balancer.url, token)
        fresh = [raw_post(url, token, idle_id) for url in direct]
        time.sleep(idle * 3)
        expired = [raw_post(url, token, idle_id) for url in direct]
    finally:
        balancer.stop()
        first.stop()
        second.stop()

    assert live == ["200", "404", "200", "404"]
    assert ended == [404, 404]
    assert forged == [404, 404, 404, 404]
    assert fresh == [200, 200]
    assert expired == [404, 404]


def test_sessions_carry_on_through_a_redis_outage_and_are_recorded_when_it_is_back(
    tmp_path,
    settings,
    http_scenario_server,  # noqa: F811 (the fixture imported above)
):
    """Redis stopped: the sessions this process holds carry on, and one opened meanwhile works
    here; Redis back: that one is recorded (any replica can then serve it)."""
    import redis

    from tests.gateway_helpers import RunningGateway, gateway_client
    from tests.owned_redis import OwnedRedis

    owned = OwnedRedis(tmp_path / "redis")
    owned.start()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": owned.url,
            "KEY_PREFIX": "outage",
        }
    }
    settings.TOOLROOM_CACHE_RETRY_SECONDS = 0.3
    alpha = TeamFactory(slug="alpha")
    GrantFactory(team=alpha, server=discovered_http_server("echo", http_scenario_server.url))
    token = AgentTokenFactory(team=alpha).plain
    gateway = RunningGateway()
    ids: list[str] = []

    async def run() -> list[str]:
        texts = []
        async with gateway_client(gateway.url, token, mode="legacy") as before:
            texts.append(text_of(await before.call_tool("echo__echo", {"text": "a"})))
            await anyio.to_thread.run_sync(owned.stop)
            texts.append(text_of(await before.call_tool("echo__echo", {"text": "b"})))
            async with gateway_client(gateway.url, token, mode="legacy") as during:
                texts.append(text_of(await during.call_tool("echo__echo", {"text": "c"})))
                ids.extend(gateway.app.state.sessions.connections)
                await anyio.to_thread.run_sync(owned.start)
                await anyio.sleep(0.5)  # past the store's retry time
                texts.append(text_of(await during.call_tool("echo__echo", {"text": "d"})))
                texts.append(text_of(await before.call_tool("echo__echo", {"text": "e"})))
                keys = redis.Redis.from_url(owned.url).keys("outage:gateway-session:*")
                records = [k for k in keys if not k.endswith((b":told", b":stream"))]
                ids.append(str(len(records)))
        return texts

    try:
        texts = anyio.run(run)
    finally:
        gateway.stop()
        owned.stop()

    assert texts == ["a", "b", "c", "d", "e"]
    *held, recorded = ids
    assert len(held) == 2  # both sessions held by this process during the outage
    assert recorded == "2"  # the one opened during the outage recorded once Redis was back
