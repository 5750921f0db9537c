"""Where the log messages (`notifications/message`) of one upstream call go."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# The log levels, least severe first (RFC 5424, as MCP names them).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True)
class CallLog:
    """Where a call's log messages go (`notifications/message`): to `send(level, data, logger)`,
    those at `level` or above."""

    level: str
    send: Callable[[str, Any, str | None], Awaitable[None]]

    def wants(self, level: str) -> bool:
        rank = LOG_LEVELS.index
        return level in LOG_LEVELS and rank(level) >= rank(self.level)
