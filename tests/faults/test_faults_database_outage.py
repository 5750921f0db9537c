"""A PostgreSQL outage (issue 30, item 1): PostgreSQL made unreachable behind a TCP relay that
the test cuts (relayed connections aborted, new ones refused), under a real gateway process and a
real web process (uvicorn), with a Redis of the test's own.

While the database is away, warm calls and catalogue requests whose answers the cache holds are
served from the last confirmed state, marked `X-Toolroom-Degraded: database`, for the window the
admin set; a token revoked before the outage stays refused; what needs the database fails within
one wait for the pool (5 s; at once while the outage circuit is open) with a JSON 503
(never a 30 s hang or a 500); `/readyz` answers 503 within its
budget and the gateway's `/healthz` says whether calls can succeed. Past the window nothing is
served from the cache; once the database is back, everything answers as before."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway_helpers import gateway_client
from tests.mcp_fixtures import free_port, start_http_scenario, wait_for_port
from tests.owned_postgres import POSTGRES, WebProcess
from tests.owned_redis import OwnedRedis
from tests.tcp_faults import TcpRelay

pytestmark = [pytest.mark.any_database, pytest.mark.processes]

REPO = Path(__file__).resolve().parents[2]
WINDOW_SECONDS = 12.0

_SETUP = """
import json, os
import django
django.setup()
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server
server = discovered_http_server("echo", os.environ["ECHO_URL"])
team = TeamFactory(slug="alpha")
GrantFactory(team=team, server=server)
kept, revoked = AgentTokenFactory(team=team), AgentTokenFactory(team=team)
print(json.dumps({"kept": kept.plain, "revoked": revoked.plain, "revoked_id": revoked.pk}))
"""

_REVOKE = """
import os
import django
django.setup()
from registry.teams import services
from registry.teams.models import AgentToken
token = AgentToken.objects.get(pk=int(os.environ["TOKEN_ID"]))
services.agent_token_revoke(actor="test", token=token, reason="before the outage")
"""


def _script(env: dict[str, str], code: str, **extra: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**env, **extra},
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]  # what the script said, when it failed
    return done.stdout.strip()


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, seconds: float) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.seconds = seconds

    @property
    def degraded(self) -> str | None:
        return self.headers.get("x-toolroom-degraded")

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<{self.status} {self.degraded} {self.seconds:.2f}s {self.body[:200]!r}>"


def _request(url: str, *, token: str = "", data: Any = None, etag: str = "") -> Answer:
    headers = {"Host": "127.0.0.1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if etag:
        headers["If-None-Match"] = etag
    body = None
    if data is not None:
        body = json.dumps(data).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 (ours)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (ours)
            status, got, text = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, got, text = exc.code, dict(exc.headers), exc.read()
    return Answer(status, {k.lower(): v for k, v in got.items()}, text, time.monotonic() - started)


class GatewayProcess:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "uvicorn", "workers.gateway.asgi:application"]
        with log.open("w") as output:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, timeout=60)

    def call(self, token: str) -> Answer:
        return _request(
            f"{self.base}/api/v1/tools/echo__echo/call",
            token=token,
            data={"arguments": {"text": "hello"}},
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _mcp_call(url: str, token: str) -> Any:
    async def run() -> Any:
        async with gateway_client(url, token) as client:
            await client.list_tools()
            return await client.call_tool("echo__echo", {"text": "over mcp"})

    return anyio.run(run)


def test_a_database_outage_serves_the_last_confirmed_state_and_fails_the_rest_fast(
    own_database, tmp_path
):
    echo = start_http_scenario()
    redis_server = OwnedRedis(tmp_path / "redis")
    redis_server.start()
    postgres_port = urllib.parse.urlsplit(POSTGRES).port or 5432
    relay = TcpRelay(postgres_port)
    settings_env = {
        "REDIS_URL": redis_server.url,
        "CELERY_BROKER_URL": redis_server.url,
        "TOOLROOM_DATABASE_OUTAGE_SECONDS": str(WINDOW_SECONDS),
        "TOOLROOM_CACHE_REVALIDATE_SECONDS": "1",  # production's (the suite's processes: 30)
        "TOOLROOM_EPOCH_KEEPER": "true",  # production's (off in the suite's own process)
        "TOOLROOM_GATEWAY_JOURNAL_DIR": str(tmp_path / "journal"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    (tmp_path / "prometheus").mkdir()
    direct = WebProcess(own_database, tmp_path / "direct.log", settings_env)
    web = WebProcess(own_database, tmp_path / "web.log", settings_env)
    relayed_url = POSTGRES.replace(f":{postgres_port}", f":{relay.port}") + f"/{own_database}"
    web.env["DATABASE_URL"] = relayed_url
    gateway: GatewayProcess | None = None
    try:
        direct.manage("migrate", "--no-input")
        tokens = json.loads(_script(direct.env, _SETUP, ECHO_URL=echo.url).splitlines()[-1])
        kept = tokens["kept"]
        web.start()
        gateway = GatewayProcess(web.env, tmp_path / "gateway.log")
        catalogue = f"{web.base}/api/v1/catalogue"

        # Warm: the kept token's call, its catalogue; the other token revoked before the outage.
        assert gateway.call(tokens["revoked"]).status == 200
        _script(direct.env, _REVOKE, TOKEN_ID=str(tokens["revoked_id"]))
        assert gateway.call(tokens["revoked"]).status == 401
        assert _request(catalogue, token=tokens["revoked"]).status == 401
        etag = ""
        for _ in range(8):  # steady traffic: each process keeps confirming the cache epoch
            answer = gateway.call(kept)
            assert answer.status == 200, answer
            assert answer.degraded is None
            listed = _request(catalogue, token=kept)
            assert listed.status == 200, listed
            etag = listed.headers["etag"]
            time.sleep(0.25)
        assert not _mcp_call(f"{gateway.base}/mcp", kept).is_error  # its tools list, cached
        assert _request(f"{web.base}/readyz").status in (200, 503)  # workers are not the point
        assert _request(f"{gateway.base}/healthz").status == 200

        relay.cut()
        cut_at = time.monotonic()

        # Warm calls and catalogue answers from the last confirmed state, marked so once the
        # process has tried to confirm it again (at most a revalidation interval, 1 s, later).
        early = gateway.call(kept)
        assert early.status == 200, early
        time.sleep(1.2)
        first = gateway.call(kept)
        assert first.status == 200, first
        assert first.degraded == "database"
        assert first.seconds < 6.5, first  # at most one wait for the pool (5 s), not 30 s
        calls = [gateway.call(kept) for _ in range(5)]
        assert [c.status for c in calls] == [200] * 5, calls
        assert all(c.degraded == "database" and c.seconds < 1.0 for c in calls), calls
        result = _mcp_call(f"{gateway.base}/mcp", kept)
        assert not result.is_error, result
        listed = _request(catalogue, token=kept)
        assert listed.status == 200, listed
        assert listed.degraded == "database"
        assert listed.seconds < 6.5, listed
        again = _request(catalogue, token=kept, etag=etag)
        assert again.status == 304, again
        assert again.degraded == "database"

        # A token revoked before the outage stays refused.
        for answer in (
            gateway.call(tokens["revoked"]),
            _request(catalogue, token=tokens["revoked"]),
        ):
            assert answer.status in (401, 503), answer
            assert answer.seconds < 6.5, answer

        # What needs the database fails fast with a JSON 503: a token never seen before.
        unseen = "trm_0123456789ab_" + "A" * 43
        for answer in (gateway.call(unseen), _request(catalogue, token=unseen)):
            assert answer.status == 503, answer
            assert answer.json()["error"]["code"] == "database_unavailable"
            assert answer.seconds < 6.5, answer

        # Probes answer within their own budgets.
        ready = _request(f"{web.base}/readyz")
        assert ready.status == 503, ready
        assert ready.json()["components"]["database"]["status"] == "failing"
        assert ready.seconds < 6, ready
        health = _request(f"{gateway.base}/healthz")
        assert health.status == 200, health
        assert health.json()["database"]["state"] == "degraded"
        metrics = _request(f"{web.base}/metrics").body.decode()
        assert 'cache="database"' in metrics

        # Past the window, nothing comes from the last confirmed state: refused fast.
        time.sleep(max(0.0, WINDOW_SECONDS + 1 - (time.monotonic() - cut_at)))
        late = gateway.call(kept)
        assert late.status == 503, late
        assert late.json()["error"]["code"] == "database_unavailable"
        assert late.seconds < 6.5, late
        late_list = _request(catalogue, token=kept)
        assert late_list.status == 503, late_list
        assert late_list.seconds < 6.5, late_list
        health = _request(f"{gateway.base}/healthz")
        assert health.status == 503, health
        assert health.seconds < 2.5, health

        relay.restore()
        restored_at = time.monotonic()
        deadline = restored_at + 30
        answer = gateway.call(kept)
        while (answer.status != 200 or answer.degraded) and time.monotonic() < deadline:
            time.sleep(0.25)
            answer = gateway.call(kept)
        assert answer.status == 200, answer
        assert answer.degraded is None, answer
        listed = _request(catalogue, token=kept)
        assert listed.status == 200, listed
        assert listed.degraded is None, listed
        print(
            f"first degraded call {first.seconds:.2f} s, later ones "
            f"{max(c.seconds for c in calls):.2f} s at most; readyz {ready.seconds:.2f} s; "
            f"refused past the window in {late.seconds:.2f} s; "
            f"recovered {time.monotonic() - restored_at:.1f} s after the database came back"
        )
        assert gateway.call(tokens["revoked"]).status == 401
    finally:
        if gateway is not None:
            gateway.stop()
        web.stop()
        relay.stop()
        redis_server.stop()
        echo.stop()
        for name in ("gateway.log", "web.log"):
            path = tmp_path / name
            if path.exists():
                sys.stdout.write(f"--- {name}\n{path.read_text()[-4000:]}\n")
