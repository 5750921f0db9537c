"""The audit of calls, off the call path: records are journaled, wait in memory and are written in
batches.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
from django.conf import settings
from django.db import close_old_connections

from registry.gateway.port import (
    DATABASE_ERRORS,
    RECORD_BATCH_SIZE,
    ToolCallRecord,
    database_away,
    database_circuit_open,
    database_trip,
    tool_calls_record,
)
from workers.gateway.call_journal import CallJournal, replay_orphans

logger = logging.getLogger(__name__)

MAX_BUFFERED = 100_000
REPLAY_SECONDS = 60.0


def _write(records: list[ToolCallRecord]) -> int:
    try:
        return tool_calls_record(records=records)
    finally:
        close_old_connections()


class CallRecorder:
    def __init__(
        self, *, flush_seconds: float | None = None, journal_dir: str | None = None
    ) -> None:
        if flush_seconds is None:
            flush_seconds = settings.TOOLROOM_GATEWAY_AUDIT_FLUSH_SECONDS
        self.flush_seconds = flush_seconds
        self.buffer: list[ToolCallRecord] = []
        self.full = anyio.Event()
        self.dropped = 0
        folder = settings.TOOLROOM_GATEWAY_JOURNAL_DIR if journal_dir is None else journal_dir
        self.journal: CallJournal | None = None
        if folder:
            try:
                self.journal = CallJournal(Path(folder))
            except OSError:
                logger.exception(
                    "call journal: %s is not usable; call records wait in memory only", folder
                )
        self._replayed_at = 0.0

    def add(self, record: ToolCallRecord) -> None:
        if self.journal is not None:
            try:
                self.journal.append(record)
            except OSError:
                logger.exception("call journal: a record was not journaled (it waits in memory)")
        self.buffer.append(record)
        if len(self.buffer) > MAX_BUFFERED:
            excess = len(self.buffer) - MAX_BUFFERED
            del self.buffer[:excess]
            self.dropped += excess
            logger.warning("call audit buffer full: dropped %d record(s)", excess)
        if len(self.buffer) >= RECORD_BATCH_SIZE:
            self.full.set()

    async def flush(self) -> int:
        if not self.buffer or database_circuit_open():
            return 0  # the database is away: the records wait (journaled) for its return
        batch, self.buffer = self.buffer, []
        if self.journal is not None:
            self.journal.seal()
        try:
            written = await anyio.to_thread.run_sync(_write, batch)
        except DATABASE_ERRORS as exc:
            if database_away(exc):
                database_trip(exc)
            logger.warning("could not write %d call record(s), keeping them: %s", len(batch), exc)
            self.buffer[:0] = batch
            return 0
        except Exception:
            logger.exception("could not write %d call record(s); keeping them", len(batch))
            self.buffer[:0] = batch
            return 0
        if self.journal is not None:
            # The batch held every record of the sealed segments (after a failed write they
            # stayed, and their records came back into the next batch): all in the database.
            self.journal.written()
        return written

    async def replay(self) -> int:
        """Write what stopped gateway processes left in the journal's folder."""
        self._replayed_at = time.monotonic()
        if self.journal is None or database_circuit_open():
            return 0
        folder = self.journal.folder
        try:
            return await anyio.to_thread.run_sync(lambda: replay_orphans(folder, _write))
        except DATABASE_ERRORS as exc:  # the next round (or the next start) writes them
            if database_away(exc):
                database_trip(exc)
            logger.warning("call journal: could not replay now: %s", exc)
            return 0

    async def run(self) -> None:
        await self.replay()
        while True:
            with anyio.move_on_after(self.flush_seconds):
                await self.full.wait()
            self.full = anyio.Event()
            await self.flush()
            if time.monotonic() - self._replayed_at >= REPLAY_SECONDS:
                await self.replay()

    async def close(self) -> None:
        """The gateway stops: write what waits, and remove the journal if it all went."""
        await self.flush()
        if self.journal is not None:
            self.journal.close(written=not self.buffer)
