"""Finding and ending what a killed worker left behind on this host: server processes.

Every local server process carries TOOLROOM_PROCESS_OWNER=<host>:<worker pid> in its
environment (see workers/launch.py). A process whose owner is on this host but whose worker
process no longer exists is an orphan: the janitor kills its whole process group. Containers
are the sandbox's janitor's business (by label).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from workers.launch import OWNER_ENV

logger = logging.getLogger(__name__)
PROC = Path("/proc")


def _owner_of(pid: int) -> str | None:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = f"{OWNER_ENV}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "replace")
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_orphans(*, host: str | None = None) -> list[int]:
    """Server processes on this host whose worker is gone."""
    host = host or socket.gethostname()
    orphans: list[int] = []
    if not PROC.is_dir():
        return orphans
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        owner = _owner_of(int(entry.name))
        if not owner or ":" not in owner:
            continue
        owner_host, _, owner_pid = owner.rpartition(":")
        if owner_host == host and owner_pid.isdigit() and not _alive(int(owner_pid)):
            orphans.append(int(entry.name))
    return orphans


def kill_orphans(*, host: str | None = None) -> list[int]:
    killed = []
    for pid in find_orphans(host=host):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            killed.append(pid)
    if killed:
        logger.warning("killed %d orphaned MCP server process(es): %s", len(killed), killed)
    return killed
