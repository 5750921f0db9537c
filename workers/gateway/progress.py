"""Progress of a call in flight: an upstream server's `notifications/progress` relayed to the
client that made the call (with the client's own progress token), and the call's deadline
stretched by it up to the server's maximum (docs/gateway.md, "Long calls and progress").

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import contextvars
import logging
from collections import OrderedDict
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from workers.adapters.call_log import LOG_LEVELS, CallLog

logger = logging.getLogger(__name__)

# (progress, total, message): what an upstream reported, in the SDK's own shape.
Progress = ProgressFnT


def client_progress(ctx: ServerRequestContext[Any, Any]) -> Progress | None:
    """The caller's own progress channel, if its request carried a progress token."""
    token = (ctx.meta or {}).get("progress_token")
    if token is None or isinstance(token, bool):
        return None
    session = ctx.session
    # A 2026-07-28 request's stream carries its notifications; a handshake session's
    # standalone stream carries them there (requests are answered as plain JSON).
    related = ctx.request_id if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        try:
            await session.send_progress_notification(
                token,
                progress,
                total,
                message,
                related_request_id=str(related) if related is not None else None,
            )
        except Exception:  # the client went away: the call goes on, nobody is told
            logger.debug("could not relay progress to the caller", exc_info=True)

    return relay


# The caller's progress channel for the gateway call running in this task (None: the caller
# did not ask for progress, or cannot carry it: the REST endpoint).
current_caller_progress: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "toolroom_caller_progress", default=None
)


class CallClock:
    """The deadline of one call: `deadline` seconds, moved to `deadline` seconds after each
    progress notification, never past `maximum` seconds after the start."""

    def __init__(self, *, deadline: float, maximum: float, caller: Progress | None) -> None:
        self.deadline = deadline
        self.maximum = max(maximum, deadline)
        self.caller = caller
        self.started = anyio.current_time()
        self.hard_end = self.started + self.maximum
        self.scope = anyio.CancelScope(deadline=self.started + deadline)
        self.reports = 0

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.reports += 1
        self.scope.deadline = min(anyio.current_time() + self.deadline, self.hard_end)
        if self.caller is not None:
            await self.caller(progress, total, message)

    def remaining(self) -> float:
        """How long the server may still take (the hard end: the movable deadline is the
        scope's)."""
        return max(0.05, self.hard_end - anyio.current_time())

    def timeout_message(self) -> str:
        """Why the call timed out, naming the deadline that ended it."""
        if self.reports == 0:
            return f"no answer within the call deadline of {self.deadline:g} s."
        if anyio.current_time() >= self.hard_end - 0.05:
            return (
                f"no answer within the server's maximum call time of {self.maximum:g} s (its "
                f"progress had extended the call deadline of {self.deadline:g} s up to it)."
            )
        return (
            f"no answer and no progress within the call deadline of {self.deadline:g} s after "
            f"its last progress report (the server may extend it up to {self.maximum:g} s)."
        )


# The clock of the upstream call running in this task (its progress goes to `clock.progress`).
current_clock: contextvars.ContextVar[CallClock | None] = contextvars.ContextVar(
    "toolroom_call_clock", default=None
)


# The caller's log channel for the gateway call running in this task (None: the caller did not
# ask for log messages; nothing about logging is done for such a call).
current_caller_log: contextvars.ContextVar[CallLog | None] = contextvars.ContextVar(
    "toolroom_caller_log", default=None
)


class SessionLogLevels:
    """The level each handshake session asked for with `logging/setLevel`, in this process: set
    here, or read with the session's record when it was set on another replica
    (shared_sessions.py). Bounded: the oldest sessions are forgotten first."""

    def __init__(self, limit: int = 65_536) -> None:
        self.limit = limit
        self.levels: OrderedDict[str, str] = OrderedDict()

    def set(self, session_id: str, level: str) -> None:
        self.levels[session_id] = level
        self.levels.move_to_end(session_id)
        while len(self.levels) > self.limit:
            self.levels.popitem(last=False)

    def get(self, session_id: str) -> str | None:
        return self.levels.get(session_id)


def client_log(ctx: ServerRequestContext[Any, Any], levels: SessionLogLevels) -> CallLog | None:
    """The caller's own log channel, if it asked for log messages: a 2026-07-28 request with the
    log level in its `_meta` (on the call's own stream), a handshake session that sent
    `logging/setLevel` (on its standalone stream, like progress)."""
    modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    if modern:
        level = (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
    else:
        request = ctx.request
        session_id = request.headers.get("mcp-session-id", "") if request is not None else ""
        level = levels.get(session_id) if session_id else None
    if not isinstance(level, str) or level not in LOG_LEVELS:
        return None
    session = ctx.session
    related = ctx.request_id if modern else None

    async def relay(message_level: str, data: Any, logger_name: str | None) -> None:
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams.model_validate(
                {"level": message_level, "data": data, "logger": logger_name}
            )
        )
        try:
            await session.send_notification(notification, related_request_id=related)
        except Exception:  # the client went away: the call goes on, nobody is told
            logger.debug("could not relay a log message to the caller", exc_info=True)

    return CallLog(level, relay)
