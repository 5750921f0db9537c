"""What an upstream server asks of the caller mid-call (elicitation questions, sampling, roots),
passed on to the calling client where its protocol can carry it (docs/gateway.md), and otherwise
refused at once with a clear reason.

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

from workers.adapters.askers import ELICIT, ROOTS, SAMPLE
from workers.adapters.mcp_client import Asker, AskRefused
from workers.gateway.session_relay import ask_id

INPUT_NOT_CARRIED = "input_not_carried"
INPUT_REQUIRED = "input_required"
INPUT_KEY = "toolroom"  # the key of the gateway's one input request per round
STATE_TTL_SECONDS = 600
MAX_ROUNDS = 10
REST_CANNOT_CARRY = "the REST call endpoint cannot carry questions to the caller"

# Each request a server may make of the caller: the client capability it needs, the request
# and result models, and what the refusal says the server asked for.
RELAYED: dict[str, tuple[str, type[types.Request[Any, Any]], type[types.Result], str]] = {
    ELICIT: ("elicitation", types.ElicitRequest, types.ElicitResult, "for input"),
    SAMPLE: ("sampling", types.CreateMessageRequest, types.CreateMessageResult, "for a completion"),
    ROOTS: ("roots", types.ListRootsRequest, types.ListRootsResult, "for its roots"),
}


def not_declared(method: str) -> str:
    return f"this client did not declare the {RELAYED[method][0]} capability"


def declared_by(capabilities: types.ClientCapabilities | None) -> frozenset[str] | None:
    """The methods a client's declared capabilities let us send it (None: it declared none)."""
    if capabilities is None:
        return None
    return frozenset(
        method
        for method, (name, *_rest) in RELAYED.items()
        if getattr(capabilities, name, None) is not None
    )


def as_request(method: str, params: dict[str, Any]) -> Any:
    model = RELAYED[method][1]
    return model.model_validate({"method": method, **({"params": params} if params else {})})


def question_digest(params: dict[str, Any]) -> str:
    raw = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class CallQuestions:
    """The asker of one call: forwards to the caller, collects for input_required, or refuses
    and remembers why. `declared`: the methods the caller can be sent (None: any)."""

    def __init__(
        self,
        ask: Asker | None,
        *,
        why_not: str = "",
        answers: list[tuple[str, dict[str, Any]]] | None = None,
        collect: bool = False,
        declared: frozenset[str] | None = None,
    ) -> None:
        self.ask = ask
        self.why_not = why_not
        self.declared = declared
        self.refused = ""  # set when a request came and could not be carried
        self.refused_method = ELICIT
        self.asked = 0
        # input_required (2026-07-28 callers): the answers of earlier rounds, in the order the
        # requests were made ((request digest, answer)), and the new request to make.
        self.answers = list(answers or [])
        self.collect = collect
        self.pending: dict[str, Any] | None = None  # {"method": ..., "params": ...}

    def _refuse(self, method: str, why: str) -> AskRefused:
        self.refused, self.refused_method = why, method
        return AskRefused(f"Toolroom: {why}.")

    async def __call__(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method not in RELAYED:
            raise self._refuse(method, f"Toolroom does not relay {method}")
        if self.declared is not None and method not in self.declared:
            raise self._refuse(method, not_declared(method))
        request = {"method": method, "params": params}
        index = self.asked
        self.asked += 1
        if index < len(self.answers) and self.answers[index][0] == question_digest(request):
            return self.answers[index][1]
        if self.collect:
            if len(self.answers) >= MAX_ROUNDS:
                raise self._refuse(method, f"it asked more than {MAX_ROUNDS} questions")
            del self.answers[index:]  # a different request: what follows is asked anew
            self.pending = request
            raise AskRefused("Toolroom: the caller is asked (input_required); the call is retried.")
        if self.ask is None:
            raise self._refuse(method, self.why_not or "the caller cannot answer questions")
        return await self.ask(method, params)

    def refusal(self) -> str:
        """The error message of a call whose request could not be carried ('' if none)."""
        if not self.refused:
            return ""
        if self.refused_method not in RELAYED:
            return f"the server sent the caller {self.refused_method} mid-call, but {self.refused}."
        kind, _request, _result, what = RELAYED[self.refused_method]
        return f"the server asked the caller {what} mid-call ({kind}), but {self.refused}."


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
    assert questions.pending is not None  # noqa: S101 (only called with a request pending)
    request = as_request(questions.pending["method"], questions.pending["params"])
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
    (its retry's answers come from `params`); a handshake session gets the server's request
    (`elicitation/create`, `sampling/createMessage`, `roots/list`) as a request on its session
    (the standalone stream: the gateway answers requests as plain JSON, which cannot carry
    one), through the session's `connection` under an id naming this replica, so its answer
    finds the way back from whichever replica it is posted to (session_relay.py). Either way,
    only what the client declared the capability for: anything else is refused."""
    declared = declared_by(ctx.session.client_capabilities)
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
        return CallQuestions(None, answers=answers, collect=True, declared=declared)
    if not declared:
        return CallQuestions(None, declared=frozenset())
    session = ctx.session

    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = as_request(method, params)
        if connection is not None:
            answer = await connection.send_request(
                request, result_type=RELAYED[method][2], opts={"request_id": ask_id()}
            )
        else:
            answer = await session.send_request(request, RELAYED[method][2])
        return dict(answer.model_dump(by_alias=True, exclude_none=True, mode="json"))

    return CallQuestions(ask, declared=declared)
