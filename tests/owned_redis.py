"""A redis-server of a test's own, on a free port, that the test stops, freezes, restores and
restarts (the shared Redis at 6379 is never touched by fault tests)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

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
        self.process.wait(timeout=15)
        self.process = None

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
