"""What an upstream server asks of the caller mid-call (elicitation, sampling, roots), routed to
the asker of the call it belongs to, or refused when no caller can be told apart.

More: docs/workers.md, "Module notes" (`workers/adapters/mcp_client.py`)."""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from workers.adapters.call_log import CallLog

# Passing an upstream's request (elicitation, sampling, roots) on to whoever made the call:
# `Asker` takes the request's method and params in wire form and returns the answer in wire
# form, or raises `AskRefused`.
Asker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
ROOTS = "roots/list"

# The call running in this task (0: none): the SDK client's 2026-07-28 input_required driver
# dispatches in the calling task, so it finds the right caller here.
current_call: contextvars.ContextVar[int] = contextvars.ContextVar(
    "toolroom_current_call", default=0
)
call_ids = itertools.count(1)


class AskRefused(Exception):
    """The caller cannot answer an upstream's request; the message says why (for the server)."""


def _wire(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


class Askers:
    """The askers of the calls in flight on one session (None: a caller that cannot answer).

    A handshake server's request (`elicitation/create`, `sampling/createMessage`, `roots/list`)
    does not say which of our requests it belongs to, so unless it arrived in the calling task
    it is passed on only when exactly one call is in flight on the session; otherwise the server
    is told no one can answer (never a guess: that could show one caller's question to another,
    or give one caller's roots to another's call). Outside any call, no one answers."""

    def __init__(self, *, request_scoped: bool = False) -> None:
        self.in_flight: dict[int, Asker | None] = {}
        self.logs: dict[int, CallLog] = {}  # the calls whose caller asked for log messages
        # Streamable HTTP: a message on a request's own stream is dispatched in the calling task
        # (`current_call` names the call); one outside any call (the GET stream) is no call's.
        self.request_scoped = request_scoped

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """A server's log message: to the caller of the call it belongs to, if that caller
        asked for logging at its level; otherwise to no one. Over stdio (or legacy SSE) nothing
        says which call a message belongs to: it goes to the one call in flight, if only one is
        (never a guess between callers)."""
        if not self.logs:
            return
        call_id = current_call.get()
        if call_id == 0:
            if self.request_scoped or len(self.in_flight) != 1:
                return
            (call_id,) = self.in_flight
        sink = self.logs.get(call_id)
        if sink is not None and sink.wants(params.level):
            await sink.send(params.level, params.data, params.logger)

    async def _relay(self, method: str, params: dict[str, Any]) -> dict[str, Any] | types.ErrorData:
        call_id = current_call.get()
        if call_id in self.in_flight:
            asker = self.in_flight[call_id]
        else:
            if len(self.in_flight) != 1:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message=f"Toolroom cannot tell which of its callers this {method} request "
                    f"is for ({len(self.in_flight)} calls in flight on this session).",
                )
            (asker,) = self.in_flight.values()
        if asker is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"The caller cannot answer {method} requests mid-call.",
            )
        try:
            return await asker(method, params)
        except AskRefused as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))

    async def elicit(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        answer = await self._relay(ELICIT, _wire(params))
        if isinstance(answer, types.ErrorData):
            return answer
        return types.ElicitResult.model_validate(answer)

    async def sample(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        answer = await self._relay(SAMPLE, _wire(params))
        if isinstance(answer, types.ErrorData):
            return answer
        return types.CreateMessageResult.model_validate(answer)

    async def roots(self, context: Any) -> types.ListRootsResult | types.ErrorData:
        answer = await self._relay(ROOTS, {})
        if isinstance(answer, types.ErrorData):
            return answer
        return types.ListRootsResult.model_validate(answer)
