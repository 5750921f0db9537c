"""The Connect page's OpenAI and Anthropic snippets run their whole loop: list the team's tools,
let the model pick one, call it through Toolroom (REST, `?format=`), hand the result back.

Each snippet runs as a program with the real `openai` / `anthropic` package against a live
Toolroom (the web app and a real gateway in front of server-everything over Streamable HTTP).
The model's service is the one fake here: this machine reaches no model API, so a local HTTP
server answers as the Responses and Messages APIs do (first a call of a tool, then text once a
result came back) and keeps what the SDKs sent, which the test checks against the SDKs' own
request types.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from anthropic.types import ToolResultBlockParam
from openai.types.responses.response_input_item_param import FunctionCallOutput

from registry.catalogue.selectors import catalogue_for_agent
from registry.portal.connect import connect_snippets
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server
from tests.mcp_fixtures import http_server_everything, server_everything  # noqa: F401 (fixtures)
from tests.sdk_types import sdk_type_errors

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

TOOL = "everything__get-tiny-image"


class FakeModel(ThreadingHTTPServer):
    """Answers /v1/responses and /v1/messages like the model APIs: a tool call first, then text
    once the request carries a tool's result. Keeps every request body."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ModelHandler)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ModelHandler(BaseHTTPRequestHandler):
    server: FakeModel

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        answer = _responses(body) if self.path.endswith("/responses") else _messages(body)
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    answered = any(item.get("type") == "function_call_output" for item in body["input"])
    output: list[dict[str, Any]] = (
        [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "A tiny image.", "annotations": []}],
            }
        ]
        if answered
        else [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": TOOL,
                "arguments": "{}",
                "status": "completed",
            }
        ]
    )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": body["model"],
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _messages(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    content: list[dict[str, Any]] = (
        [{"type": "text", "text": "A tiny image."}]
        if answered
        else [{"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": {}}]
    )
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "end_turn" if answered else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


@pytest.fixture
def model() -> Iterator[FakeModel]:
    server = FakeModel()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture
def snippets(
    http_server_everything,  # noqa: F811 (the fixture imported above)
    live_server,
    settings,
) -> Iterator[tuple[dict[str, str], str]]:
    server = discovered_http_server("everything", http_server_everything.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team)
    gateway = RunningGateway()
    settings.TOOLROOM_GATEWAY_INTERNAL_URL = gateway.base
    catalogue = catalogue_for_agent(team_id=team.pk, role_id=token.role_id)
    found = connect_snippets(catalogue=catalogue, public_url=live_server.url)
    yield {snippet.key: snippet.text for snippet in found}, token.plain
    gateway.stop()


def _run(program: str, token: str, model: FakeModel, tmp_path: Any) -> str:
    path = tmp_path / "loop.py"
    path.write_text(program)
    result = subprocess.run(
        [sys.executable, str(path)],
        env={
            "PATH": "/usr/bin:/bin",
            "TOOLROOM_AGENT_TOKEN": token,
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": f"{model.url}/v1",
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "ANTHROPIC_BASE_URL": model.url,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_openai_snippet_lists_picks_calls_and_hands_the_image_back(snippets, model, tmp_path):
    programs, token = snippets

    printed = _run(programs["openai"], token, model, tmp_path)

    assert printed.strip() == "A tiny image."
    (_, first), (_, second) = model.requests
    assert TOOL in [tool["name"] for tool in first["tools"]]  # the team's catalogue
    (handed_back,) = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert sdk_type_errors(handed_back, FunctionCallOutput) == []
    assert handed_back["call_id"] == "call_1"
    assert "input_image" in [part["type"] for part in handed_back["output"]]


def test_the_anthropic_snippet_lists_picks_calls_and_hands_the_image_back(
    snippets, model, tmp_path
):
    programs, token = snippets

    printed = _run(programs["anthropic"], token, model, tmp_path)

    assert printed.strip() == "A tiny image."
    (_, first), (_, second) = model.requests
    assert TOOL in [tool["name"] for tool in first["tools"]]
    (handed_back,) = second["messages"][-1]["content"]
    assert sdk_type_errors(handed_back, ToolResultBlockParam) == []
    assert handed_back["tool_use_id"] == "toolu_1"
    assert "image" in [block["type"] for block in handed_back["content"]]
