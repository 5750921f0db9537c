"""A PostgreSQL database of a test's own (created and dropped around it, whatever the suite's
database is), and a real web process (uvicorn, migrated first) serving it, for fault tests that
need a database they may lock, terminate or fill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.mcp_fixtures import free_port, wait_for_port

REPO = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("TOOLROOM_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")


@pytest.fixture
def own_database() -> Iterator[str]:
    name = f"toolroom_fault_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(f"{POSTGRES}/postgres", autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES}: {exc}")
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close()


class WebProcess:
    """`manage.py` commands and a uvicorn web process on the database `database` (its own
    settings: the test profile, `env` on top of this process's environment)."""

    def __init__(self, database: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "registry.settings",
            "TOOLROOM_PROFILE": "test",
            "DATABASE_URL": f"{POSTGRES}/{database}",
            "TOOLROOM_CACHE_PREFIX": database,
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "registry.asgi:application",
                    "--port",
                    str(self.port),
                ],
                cwd=REPO,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, timeout=60)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
