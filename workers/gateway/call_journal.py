"""The gateway's call journal: call records on disk from the moment they are made until their
batch INSERT committed, so that a gateway killed with SIGKILL loses none of them.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from registry.gateway.port import ToolCallRecord

logger = logging.getLogger(__name__)

_FIELDS = {f.name for f in fields(ToolCallRecord)}
_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
_numbers = itertools.count()


@dataclass
class Segment:
    path: Path
    fd: int

    def close(self, *, remove: bool) -> None:
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        os.close(self.fd)  # and with it the lock


class CallJournal:
    """This process's segments in `folder` (see the module's docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.prefix = f"calls-{socket.gethostname()}-{os.getpid()}-"
        self.current = self._open()
        self.sealed: list[Segment] = []  # taken for a batch, not yet in the database

    def _open(self) -> Segment:
        # Locked under a name the replay does not look at, then renamed: no other process can
        # take a new, empty segment for an orphan.
        name = f"{self.prefix}{next(_numbers)}.jsonl"
        making = self.folder / f".{name}"
        fd = os.open(making, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = self.folder / name
        making.rename(path)
        return Segment(path, fd)

    def append(self, record: ToolCallRecord) -> None:
        # vars(), not dataclasses.asdict(): no deep copy (a call's arguments are JSON already).
        os.write(self.current.fd, _encode(vars(record)).encode() + b"\n")

    def seal(self) -> None:
        """The records so far go into a batch: later ones go to a new segment."""
        self.sealed.append(self.current)
        self.current = self._open()

    def written(self) -> None:
        """Every sealed segment's records are in the database: remove them."""
        for segment in self.sealed:
            segment.close(remove=True)
        self.sealed = []

    def close(self, *, written: bool) -> None:
        """The process stops; `written`: everything it journaled is in the database."""
        if written:
            self.written()
            self.current.close(remove=True)
            return
        for segment in [*self.sealed, self.current]:
            segment.close(remove=False)  # left for the next start to replay


def _records(path: Path) -> list[ToolCallRecord]:
    records = []
    for line in path.read_bytes().split(b"\n"):
        try:
            values: dict[str, Any] = json.loads(line)
        except ValueError:
            continue  # empty, or the line the kill cut short
        records.append(ToolCallRecord(**{k: v for k, v in values.items() if k in _FIELDS}))
    return records


def replay_orphans(
    folder: Path, write: Callable[[list[ToolCallRecord]], int], *, batch: int = 500
) -> int:
    """Write the records of segments no live process holds, then remove them; how many records
    were read (a segment whose write fails stays for the next try)."""
    replayed = 0
    for path in sorted(folder.glob("calls-*.jsonl")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # removed meanwhile by its owner
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process holds it
            records = _records(path)
            for start in range(0, len(records), batch):
                write(records[start : start + batch])
            path.unlink()
            replayed += len(records)
            if records:
                logger.warning(
                    "call journal: wrote %d call record(s) a stopped gateway left in %s",
                    len(records),
                    path.name,
                )
        except Exception:
            logger.exception("call journal: could not replay %s; trying again later", path.name)
        finally:
            os.close(fd)
    return replayed
