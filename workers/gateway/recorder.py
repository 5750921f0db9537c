"""The audit of calls, off the call path: records wait in memory and are written in batches.

A call only appends to a list; a background task writes what gathered once a second (or as soon
as a batch is full) in one INSERT per batch, in a thread. If the database is away the records wait
(up to MAX_BUFFERED, then the oldest are dropped with a warning) and are written once it is back.
"""

from __future__ import annotations

import logging

import anyio
from django.db import close_old_connections

from registry.gateway.services import RECORD_BATCH_SIZE, ToolCallRecord, tool_calls_record

logger = logging.getLogger(__name__)

MAX_BUFFERED = 100_000


class CallRecorder:
    def __init__(self, *, flush_seconds: float = 1.0) -> None:
        self.flush_seconds = flush_seconds
        self.buffer: list[ToolCallRecord] = []
        self.full = anyio.Event()
        self.dropped = 0

    def add(self, record: ToolCallRecord) -> None:
        self.buffer.append(record)
        if len(self.buffer) > MAX_BUFFERED:
            excess = len(self.buffer) - MAX_BUFFERED
            del self.buffer[:excess]
            self.dropped += excess
            logger.warning("call audit buffer full: dropped %d record(s)", excess)
        if len(self.buffer) >= RECORD_BATCH_SIZE:
            self.full.set()

    async def flush(self) -> int:
        if not self.buffer:
            return 0
        batch, self.buffer = self.buffer, []

        def write() -> int:
            try:
                return tool_calls_record(records=batch)
            finally:
                close_old_connections()

        try:
            return await anyio.to_thread.run_sync(write)
        except Exception:
            logger.exception("could not write %d call record(s); keeping them", len(batch))
            self.buffer[:0] = batch
            return 0

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(self.flush_seconds):
                await self.full.wait()
            self.full = anyio.Event()
            await self.flush()
