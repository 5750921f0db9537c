"""Finding and ending what a killed worker left behind on this host: server processes.

Every local server process carries TOOLROOM_PROCESS_OWNER=<host>:<worker pid> and
TOOLROOM_PROCESS_INSTALLATION=<installation> in its environment (see workers/launch.py). A
process of this installation whose owner is on this host but whose worker process no longer
exists is an orphan: the janitor kills its whole process group. Another installation's on the
same host are its own janitor's business, and so are processes started before installations were
named (they carry no installation). Containers are the sandbox's janitor's business (by label).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from django.conf import settings

from workers.launch import INSTALLATION_ENV, OWNER_ENV

logger = logging.getLogger(__name__)
PROC = Path("/proc")


def _owner_of(pid: int) -> tuple[str, str] | None:
    """The (owner tag, installation) a server process carries, or None for other processes."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    found: dict[str, str] = {}
    for entry in environ.split(b"\0"):
        name, _, value = entry.partition(b"=")
        if name in (OWNER_ENV.encode(), INSTALLATION_ENV.encode()):
            found[name.decode()] = value.decode("utf-8", "replace")
    if OWNER_ENV not in found:
        return None
    return found[OWNER_ENV], found.get(INSTALLATION_ENV, "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_orphans(*, host: str | None = None, installation: str | None = None) -> list[int]:
    """Server processes of this installation on this host whose worker is gone."""
    host = host or socket.gethostname()
    installation = installation or settings.TOOLROOM_INSTALLATION
    orphans: list[int] = []
    if not PROC.is_dir():
        return orphans
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        found = _owner_of(int(entry.name))
        if found is None or found[1] != installation or ":" not in found[0]:
            continue
        owner_host, _, owner_pid = found[0].rpartition(":")
        if owner_host == host and owner_pid.isdigit() and not _alive(int(owner_pid)):
            orphans.append(int(entry.name))
    return orphans


def kill_orphans(*, host: str | None = None, installation: str | None = None) -> list[int]:
    killed = []
    for pid in find_orphans(host=host, installation=installation):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            killed.append(pid)
    if killed:
        logger.warning("killed %d orphaned MCP server process(es): %s", len(killed), killed)
    return killed
