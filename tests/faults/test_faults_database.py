"""Database blips: PostgreSQL terminates every connection of the web process
(`pg_terminate_backend`), and the very next requests are answered from fresh connections, not with
500s from broken ones. The web process is a real uvicorn on a PostgreSQL database this test
creates and drops (whatever the suite's own database is), so the test holds on SQLite runs too."""

from __future__ import annotations

import urllib.error
import urllib.request

import psycopg
import pytest

from tests.owned_postgres import POSTGRES, WebProcess
from tests.waiting import wait_for

pytestmark = [pytest.mark.any_database, pytest.mark.processes]


def _terminate_connections(database: str) -> int:
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return len(rows)


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Host": "127.0.0.1"})  # noqa: S310 (ours)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (our server)
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_web_process_survives_terminated_connections(own_database, tmp_path):
    web = WebProcess(
        own_database,
        tmp_path / "web.log",
        {
            "DATABASE_POOL_MIN_SIZE": "4",
            # Every catalogue request reads the database (no document cache, no fast path).
            "TOOLROOM_CATALOGUE_CACHE_SECONDS": "0",
            "TOOLROOM_CATALOGUE_FAST_PATH": "false",
            # Metrics in multiprocess mode, as the compose stack runs uvicorn.
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        },
    )
    web.manage("migrate", "--no-input")
    web.manage("create_team", "blips")
    token = web.manage("create_agent_token", "--team", "blips", "--role", "review", "--name", "bot")
    web.start()
    try:
        base = web.base
        formats = ["native", "mcp", "openai", "anthropic"]
        for fmt in formats:
            assert _get(f"{base}/api/v1/catalogue?format={fmt}", token) == 200
        wait_for(lambda: _get(f"{base}/readyz") == 200, timeout=30, what="readiness")

        assert _terminate_connections(own_database) >= 1

        answers = [_get(f"{base}/api/v1/catalogue?format={fmt}", token) for fmt in formats * 3]
        answers.append(_get(f"{base}/readyz"))
        assert answers == [200] * len(answers), web.log.read_text()[-3000:]
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:  # noqa: S310
            text = response.read().decode()
        for fmt in formats:  # 1 before the blip, 3 after, each a cache miss (no document cache)
            line = f'toolroom_catalogue_requests_total{{cache="miss",format="{fmt}",status="200"}}'
            assert f"{line} 4.0" in text
    finally:
        web.stop()
