"""Questions an upstream server asks mid-call (elicitation), passed on to the calling client where
its protocol can carry it (docs/gateway.md), and otherwise refused at once with a clear reason.

`CallQuestions` is the asker of one gateway call: the upstream session hands it the server's
`elicitation/create` params (see `workers.adapters.mcp_client.Asker`); it forwards them to the
caller's own asker, or refuses and remembers why, so the call ends with an error that names the
server and says what could not be carried, never a hang.
"""

from __future__ import annotations

import contextvars
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from workers.adapters.mcp_client import Asker, AskRefused

INPUT_NOT_CARRIED = "input_not_carried"
MODERN_CANNOT_CARRY = (
    "a 2026-07-28 (stateless) client cannot be asked through the gateway: its input_required "
    "round trip is not passed on yet; a client on the handshake (2025-11-25) that declares the "
    "elicitation capability can answer"
)
NO_ELICITATION = "this client did not declare the elicitation capability"
REST_CANNOT_CARRY = "the REST call endpoint cannot carry questions to the caller"


class CallQuestions:
    """The asker of one call: forwards to the caller, or refuses and remembers why."""

    def __init__(self, ask: Asker | None, *, why_not: str = "") -> None:
        self.ask = ask
        self.why_not = why_not
        self.refused = ""  # set when a question came and could not be carried
        self.asked = 0

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if self.ask is None:
            self.refused = self.why_not or "the caller cannot answer questions"
            raise AskRefused(f"Toolroom: {self.refused}.")
        return await self.ask(params)

    def refusal(self) -> str:
        """The error message of a call whose question could not be carried ('' if none)."""
        if not self.refused:
            return ""
        return f"the server asked the caller for input mid-call (elicitation), but {self.refused}."


# The questions of the gateway call running in this task (read where the upstream call starts).
current_questions: contextvars.ContextVar[CallQuestions | None] = contextvars.ContextVar(
    "toolroom_call_questions", default=None
)


def client_asker(ctx: ServerRequestContext[Any, Any]) -> CallQuestions:
    """The calling MCP client as an asker: a handshake session that declared elicitation gets
    the server's question as an `elicitation/create` request on its session (the standalone
    stream: the gateway answers requests as plain JSON, which cannot carry a request)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return CallQuestions(None, why_not=MODERN_CANNOT_CARRY)
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return CallQuestions(None, why_not=NO_ELICITATION)
    session = ctx.session

    async def ask(params: dict[str, Any]) -> dict[str, Any]:
        request = types.ElicitRequest.model_validate(
            {"method": "elicitation/create", "params": params}
        )
        answer = await session.send_request(request, types.ElicitResult)
        return dict(answer.model_dump(by_alias=True, exclude_none=True, mode="json"))

    return CallQuestions(ask)
