"""Checks that the suite leaves no zombie and no orphaned MCP server process behind."""

from __future__ import annotations

import os
from pathlib import Path

from workers.launch import OWNER_ENV

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces; state and ppid follow it.
    rest = text.rsplit(")", 1)[1].split()
    return rest[0], int(rest[1])


def zombie_children(parent: int | None = None) -> list[int]:
    parent = parent or os.getpid()
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat and stat[1] == parent and stat[0] == "Z":
                found.append(int(entry.name))
    return found


def server_processes_started_by(pid_tags: set[str]) -> list[int]:
    """Live processes whose TOOLROOM_PROCESS_OWNER names one of `pid_tags` (host:pid)."""
    found = []
    prefix = f"{OWNER_ENV}=".encode()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix) and item[len(prefix) :].decode(errors="replace") in pid_tags:
                stat = _stat(int(entry.name))
                if stat and stat[0] != "Z":
                    found.append(int(entry.name))
    return found
