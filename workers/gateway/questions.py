"""Questions an upstream server asks mid-call (elicitation), passed on to the calling client where
its protocol can carry it (docs/gateway.md), and otherwise refused at once with a clear reason.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import time
from typing import Any

import mcp_types as types
from django.conf import settings
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from workers.adapters.mcp_client import Asker, AskRefused
from workers.gateway.session_relay import ask_id

INPUT_NOT_CARRIED = "input_not_carried"
INPUT_REQUIRED = "input_required"
INPUT_KEY = "toolroom"  # the key of the gateway's one input request per round
STATE_TTL_SECONDS = 600
MAX_ROUNDS = 10
NO_ELICITATION = "this client did not declare the elicitation capability"
REST_CANNOT_CARRY = "the REST call endpoint cannot carry questions to the caller"


def question_digest(params: dict[str, Any]) -> str:
    raw = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class CallQuestions:
    """The asker of one call: forwards to the caller, collects for input_required, or refuses
    and remembers why."""

    def __init__(
        self,
        ask: Asker | None,
        *,
        why_not: str = "",
        answers: list[tuple[str, dict[str, Any]]] | None = None,
        collect: bool = False,
    ) -> None:
        self.ask = ask
        self.why_not = why_not
        self.refused = ""  # set when a question came and could not be carried
        self.asked = 0
        # input_required (2026-07-28 callers): the answers of earlier rounds, in the order the
        # questions were asked ((question digest, answer)), and the new question to ask.
        self.answers = list(answers or [])
        self.collect = collect
        self.pending: dict[str, Any] | None = None

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        index = self.asked
        self.asked += 1
        if index < len(self.answers) and self.answers[index][0] == question_digest(params):
            return self.answers[index][1]
        if self.collect:
            if len(self.answers) >= MAX_ROUNDS:
                self.refused = f"it asked more than {MAX_ROUNDS} questions"
                raise AskRefused(f"Toolroom: {self.refused}.")
            del self.answers[index:]  # a different question: what follows is asked anew
            self.pending = params
            raise AskRefused("Toolroom: the caller is asked (input_required); the call is retried.")
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


class InvalidState(ValueError):
    """A requestState the gateway did not issue for this call, or one that expired."""


def _state_key() -> bytes:
    return hmac.new(settings.SECRET_KEY.encode(), b"toolroom request state", "sha256").digest()


def _binding(caller: str, name: str, arguments: dict[str, Any]) -> str:
    return question_digest({"caller": caller, "tool": name, "arguments": arguments})


def seal_state(
    questions: CallQuestions, *, caller: str, name: str, arguments: dict[str, Any]
) -> str:
    """The requestState of an input_required answer: the answers so far and the question."""
    assert questions.pending is not None  # noqa: S101 (only called with a question pending)
    payload = {
        "b": _binding(caller, name, arguments),
        "q": questions.answers,
        "p": question_digest(questions.pending),
        "e": int(time.time()) + STATE_TTL_SECONDS,
    }
    body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode())
    signature = hmac.new(_state_key(), body, "sha256").hexdigest()
    return f"{body.decode()}.{signature}"


def open_state(
    state: str,
    responses: dict[str, Any],
    *,
    caller: str,
    name: str,
    arguments: dict[str, Any],
) -> list[tuple[str, dict[str, Any]]]:
    """The answers a retried call carries: those of earlier rounds and the new one."""
    body, _, signature = state.partition(".")
    expected = hmac.new(_state_key(), body.encode(), "sha256").hexdigest()
    if not hmac.compare_digest(signature, expected):
        raise InvalidState("The requestState was not issued by Toolroom.")
    try:
        payload = json.loads(base64.urlsafe_b64decode(body.encode()))
    except ValueError as exc:
        raise InvalidState("The requestState is malformed.") from exc
    if payload["b"] != _binding(caller, name, arguments):
        raise InvalidState("The requestState belongs to another call.")
    if payload["e"] < time.time():
        raise InvalidState("The requestState expired; call the tool again.")
    answer = responses.get(INPUT_KEY)
    if not isinstance(answer, dict):
        raise InvalidState(f"The retry carries no answer under inputResponses['{INPUT_KEY}'].")
    return [(str(d), dict(a)) for d, a in payload["q"]] + [(str(payload["p"]), answer)]


def input_required_result(
    questions: CallQuestions, *, caller: str, name: str, arguments: dict[str, Any]
) -> types.InputRequiredResult:
    request = types.ElicitRequest.model_validate(
        {"method": "elicitation/create", "params": questions.pending}
    )
    return types.InputRequiredResult(
        input_requests={INPUT_KEY: request},
        request_state=seal_state(questions, caller=caller, name=name, arguments=arguments),
    )


def client_asker(
    ctx: ServerRequestContext[Any, Any],
    params: types.CallToolRequestParams | None = None,
    *,
    caller: str = "",
    connection: Connection | None = None,
) -> CallQuestions:
    """The calling MCP client as an asker. A 2026-07-28 client is asked with `input_required`
    (its retry's answers come from `params`); a handshake session that declared elicitation
    gets the server's question as an `elicitation/create` request on its session (the
    standalone stream: the gateway answers requests as plain JSON, which cannot carry one),
    through the session's `connection` under an id naming this replica, so its answer finds
    the way back from whichever replica it is posted to (session_relay.py)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answers: list[tuple[str, dict[str, Any]]] = []
        if params is not None and params.request_state:
            responses = {
                key: value.model_dump(by_alias=True, exclude_none=True, mode="json")
                for key, value in (params.input_responses or {}).items()
            }
            answers = open_state(
                params.request_state,
                responses,
                caller=caller,
                name=params.name,
                arguments=dict(params.arguments or {}),
            )
        return CallQuestions(None, answers=answers, collect=True)
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return CallQuestions(None, why_not=NO_ELICITATION)
    session = ctx.session

    async def ask(params: dict[str, Any]) -> dict[str, Any]:
        request = types.ElicitRequest.model_validate(
            {"method": "elicitation/create", "params": params}
        )
        if connection is not None:
            answer = await connection.send_request(request, opts={"request_id": ask_id()})
        else:
            answer = await session.send_request(request, types.ElicitResult)
        return dict(answer.model_dump(by_alias=True, exclude_none=True, mode="json"))

    return CallQuestions(ask)
