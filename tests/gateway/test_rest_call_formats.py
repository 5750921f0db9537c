"""`POST /api/v1/tools/{name}/call?format=openai|anthropic`: the result as each SDK accepts it
back as a tool result, checked against the `openai` and `anthropic` packages' own types, with a
real published server (server-everything over Streamable HTTP) behind a real gateway."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import ToolResultBlockParam
from openai.types.responses.response_input_item_param import FunctionCallOutput

from registry.gateway.models import ToolCall
from registry.gateway.result_formats import render_result
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server
from tests.mcp_fixtures import http_server_everything, server_everything  # noqa: F401 (fixtures)
from tests.sdk_types import sdk_type_errors

# One of each block an MCP tool result may hold.
EVERY_BLOCK: dict[str, Any] = {
    "content": [
        {"type": "text", "text": "Here you are."},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "image", "data": "PHN2Zz4=", "mimeType": "image/svg+xml"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource_link",
            "uri": "file:///notes/a.txt",
            "name": "a.txt",
            "mimeType": "text/plain",
            "description": "The first note",
        },
        {"type": "resource", "resource": {"uri": "memo://1", "text": "remember"}},
        {
            "type": "resource",
            "resource": {"uri": "file:///r.pdf", "mimeType": "application/pdf", "blob": "JVBE"},
        },
        {
            "type": "resource",
            "resource": {"uri": "file:///x.bin", "mimeType": "application/zip", "blob": "UEsD"},
        },
    ],
    "structuredContent": None,
    "isError": False,
}


def _as_openai(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "call_id": "call_1"}


def _as_anthropic(result: dict[str, Any]) -> dict[str, Any]:
    return {**result, "tool_use_id": "toolu_1"}


def test_the_mcp_content_itself_is_not_a_tool_result_either_sdk_accepts():
    # Why the formats exist: images and resource links fail both SDKs' types as MCP sends them.
    content = EVERY_BLOCK["content"]

    assert sdk_type_errors(
        _as_openai({"type": "function_call_output", "output": content}), FunctionCallOutput
    )
    assert sdk_type_errors(
        _as_anthropic({"type": "tool_result", "content": content}), ToolResultBlockParam
    )


def test_every_block_becomes_what_the_openai_sdk_accepts():
    rendered = render_result(EVERY_BLOCK, "openai")

    assert sdk_type_errors(_as_openai(rendered), FunctionCallOutput) == []
    kinds = [part["type"] for part in rendered["output"]]
    assert kinds == [
        "input_text", "input_image", "input_text", "input_text", "input_text", "input_text",
        "input_file", "input_text",
    ]  # fmt: skip
    assert rendered["output"][1]["image_url"] == "data:image/png;base64,iVBORw0KGgo="
    assert rendered["output"][4]["text"] == (
        "Resource link: a.txt <file:///notes/a.txt> (text/plain): The first note"
    )
    assert "cannot carry" in rendered["output"][2]["text"]  # svg: said, not dropped


def test_every_block_becomes_what_the_anthropic_sdk_accepts():
    rendered = render_result({**EVERY_BLOCK, "isError": True}, "anthropic")

    assert sdk_type_errors(_as_anthropic(rendered), ToolResultBlockParam) == []
    assert rendered["is_error"] is True
    kinds = [block["type"] for block in rendered["content"]]
    assert kinds == ["text", "image", "text", "text", "text", "document", "document", "text"]
    assert rendered["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }


def test_structured_content_alone_is_handed_back_as_text():
    result = {"content": [], "structuredContent": {"sum": 5}, "isError": False}

    assert render_result(result, "anthropic")["content"] == [{"type": "text", "text": '{"sum": 5}'}]
    assert render_result(result, "openai")["output"] == [
        {"type": "input_text", "text": '{"sum": 5}'}
    ]


@pytest.mark.django_db
def test_an_unknown_format_is_refused_before_the_call(api_client):
    token = AgentTokenFactory()
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")

    response = api_client.post(
        "/api/v1/tools/files__read/call?format=langchain", {"arguments": {}}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_format",
        "message": "format must be one of mcp, openai, anthropic (mcp when absent), not "
        "'langchain'.",
        "fields": {},
    }
    assert not ToolCall.objects.exists()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_server_everything_results_through_the_gateway_fit_both_sdks(
    http_server_everything,  # noqa: F811 (the fixture imported above)
    api_client,
    settings,
):
    server = discovered_http_server("everything", http_server_everything.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team)
    gateway = RunningGateway()
    settings.TOOLROOM_GATEWAY_INTERNAL_URL = gateway.base
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")

    def call(tool: str, arguments: dict[str, Any], fmt: str) -> dict[str, Any]:
        response = api_client.post(
            f"/api/v1/tools/everything__{tool}/call?format={fmt}",
            {"arguments": arguments},
            format="json",
        )
        assert response.status_code == 200, response.content
        answer: dict[str, Any] = response.json()
        return answer

    try:
        calls = [
            ("get-tiny-image", {}),
            ("get-resource-links", {"count": 3}),
            ("get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
            ("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
        ]
        for tool, arguments in calls:
            raw = call(tool, arguments, "mcp")
            openai = call(tool, arguments, "openai")
            anthropic = call(tool, arguments, "anthropic")

            assert sdk_type_errors(_as_openai(openai), FunctionCallOutput) == [], tool
            assert sdk_type_errors(_as_anthropic(anthropic), ToolResultBlockParam) == [], tool
            assert openai == render_result(raw, "openai")
            assert anthropic == render_result(raw, "anthropic")
        image = call("get-tiny-image", {}, "anthropic")
        assert [b["type"] for b in image["content"]].count("image") == 1
        links = call("get-resource-links", {"count": 3}, "openai")
        assert sum("Resource link:" in part.get("text", "") for part in links["output"]) == 3
    finally:
        gateway.stop()
