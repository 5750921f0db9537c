"""A redis-server of a test's own, on a free port, that the test stops, freezes, restores,
restarts and makes refuse writes (the shared Redis at 6379 is never touched by fault tests)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.mcp_fixtures import free_port, wait_for_port


class OwnedRedis:
    """redis-server with append-only persistence (as docker-compose.yml runs it) in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                # `dir` may be changed at run time: refuse_writes() takes the disk away.
                "--enable-protected-configs",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port)

    def stop(self) -> None:
        """A clean shutdown: what Redis held is on disk and comes back with the next start."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            # Refusing writes, it will not exit without its final snapshot: nothing to keep.
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None

    def refuse_writes(self) -> None:
        """What a full disk does: a snapshot fails and Redis answers every write with MISCONF
        (`stop-writes-on-bgsave-error`, on by default). The snapshot directory is taken away
        from under it (an unprivileged stand-in for a full disk)."""
        client = redis.Redis.from_url(self.url)
        disk = self.directory.parent / f"{self.directory.name}-gone-disk"
        disk.mkdir()
        client.config_set("dir", str(disk))
        client.config_set("save", "3600 1")
        disk.rmdir()
        client.bgsave()
        self._wait_for_snapshot(client, "err")

    def accept_writes(self) -> None:
        """The disk has room again: the next snapshot succeeds and writes are accepted."""
        client = redis.Redis.from_url(self.url)
        disk = self.directory.parent / f"{self.directory.name}-new-disk"
        disk.mkdir(exist_ok=True)
        client.config_set("dir", str(disk))
        client.bgsave()
        self._wait_for_snapshot(client, "ok")
        client.config_set("save", "")

    @staticmethod
    def _wait_for_snapshot(client: redis.Redis, status: str) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            info = client.info("persistence")
            if not info["rdb_bgsave_in_progress"] and info["rdb_last_bgsave_status"] == status:
                return
            time.sleep(0.05)
        raise RuntimeError(f"Redis's snapshot did not end {status!r}")

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def snapshot(self, into: Path) -> None:
        """Copy the data files (call while stopped)."""
        shutil.copytree(self.directory, into)

    def restore(self, snapshot: Path) -> None:
        """Put an older copy of the data files back (call while stopped)."""
        shutil.rmtree(self.directory)
        shutil.copytree(snapshot, self.directory)

    def wipe(self) -> None:
        shutil.rmtree(self.directory)
