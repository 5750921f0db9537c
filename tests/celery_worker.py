"""A real Celery worker process (and a real beat) on the test database and the real Redis broker,
for the tests that need work to cross process boundaries (and to kill a worker for real)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{user}{password}@{host}{port}/{db['NAME']}"


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "test",
        "DATABASE_URL": database_url(),
        **(env or {}),
    }


class CeleryWorker:
    """`celery -A workers worker` with the threads pool on the given queues, until stopped."""

    def __init__(
        self,
        log: Path,
        *,
        queues: str = "toolroom,discovery,runtime",
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> None:
        if not settings.CELERY_BROKER_URL.startswith("redis"):
            pytest.fail("Worker tests need the real Redis broker: set REDIS_URL (make test does).")
        self.node = f"e2e-{uuid.uuid4().hex[:8]}@{os.uname().nodename}"
        self.log = log
        environment = _environment(env)
        argv = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", queues]
        argv += ["-P", "threads", "-c", str(concurrency), "-n", self.node]
        argv += ["--without-gossip", "--without-mingle", "-l", "info"]
        with log.open("a") as output:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=environment, stdout=output, stderr=subprocess.STDOUT
            )
        wait_for(
            lambda: "ready." in log.read_text() or self.process.poll() is not None,
            timeout=60,
            what="the worker to be ready",
            log=log,
        )
        assert self.process.poll() is None, log.read_text()[-3000:]

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing acknowledged, nothing cleaned up."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class CeleryBeat:
    """`celery -A workers beat` with the database scheduler (the schedules are the test
    database's PeriodicTask rows), until stopped."""

    def __init__(self, log: Path, *, env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "workers", "beat", "-l", "info"]
        argv += ["--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"]
        argv += ["--schedule", str(log.with_suffix(".schedule"))]
        with log.open("a") as output:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=_environment(env), stdout=output, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
