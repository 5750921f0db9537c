"""An MCP server for the tests whose tools ask the caller for a completion (sampling) and for its
roots mid-call, written with the SDK's low-level Server.

`summarize` asks the client's model to summarise its `text` and answers with what the model said;
`where` lists the client's roots and answers with their URIs. On the handshake it sends
`sampling/createMessage` (on the call's own stream) and `roots/list` (on the session's standalone
stream, as the SDK's `list_roots` does); on 2026-07-28 it answers `input_required`. With
`--sampling-only` / `--roots-only` a tool is listed only to clients that declare the capability
(a server may do so). `hold` waits `seconds`; reading the resource `roots://mine` asks for the
roots during the read (handshake only). Serves stdio by default, Streamable HTTP with `--http PORT`.
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

TOOLS = {
    "summarize": {
        "name": "summarize",
        "description": "Ask the caller's model to summarise a text (sampling).",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
    "where": {
        "name": "where",
        "description": "Say which roots the caller shares (roots).",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
    "hold": {
        "name": "hold",
        "description": "Wait a while, then answer.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        "annotations": {"readOnlyHint": True},
    },
    "echo": {
        "name": "echo",
        "description": "Answer with the text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
}


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def _sampling_params(text: str) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(
                role="user", content=types.TextContent(type="text", text=f"Summarise: {text}")
            )
        ],
        max_tokens=50,
    )


def _said(result: Any) -> str:
    data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return f"{data.get('model')}: {data.get('content', {}).get('text')}"


def _uris(result: Any) -> str:
    data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return json.dumps([root["uri"] for root in data.get("roots", [])])


async def _summarize(ctx: Any, params: types.CallToolRequestParams) -> Any:
    text = str((params.arguments or {}).get("text", ""))
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer = (params.input_responses or {}).get("sample")
        if answer is None:
            request = types.CreateMessageRequest(params=_sampling_params(text))
            return types.InputRequiredResult(input_requests={"sample": request})
        return _text(_said(answer))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sampling is deprecated as of 2026-07-28
            sent = _sampling_params(text)
            result = await ctx.session.create_message(
                sent.messages, max_tokens=sent.max_tokens, related_request_id=ctx.request_id
            )
    except Exception as exc:  # the client answered with an error
        return _text(f"not sampled: {exc}", error=True)
    return _text(_said(result))


async def _where(ctx: Any, params: types.CallToolRequestParams) -> Any:
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer = (params.input_responses or {}).get("roots")
        if answer is None:
            return types.InputRequiredResult(input_requests={"roots": types.ListRootsRequest()})
        return _text(_uris(answer))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated as of 2026-07-28
            result = await ctx.session.list_roots()
    except Exception as exc:
        return _text(f"no roots: {exc}", error=True)
    return _text(_uris(result))


def build_server(args: argparse.Namespace) -> Server[Any]:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        declared = ctx.session.client_capabilities
        names = ["echo", "hold", "summarize", "where"]
        if args.sampling_only and (declared is None or declared.sampling is None):
            names.remove("summarize")
        if args.roots_only and (declared is None or declared.roots is None):
            names.remove("where")
        return types.ListToolsResult(tools=[types.Tool.model_validate(TOOLS[n]) for n in names])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        if params.name == "summarize":
            return await _summarize(ctx, params)
        if params.name == "where":
            return await _where(ctx, params)
        if params.name == "hold":
            await anyio.sleep(float((params.arguments or {}).get("seconds", 1)))
            return _text("held")
        return _text(str((params.arguments or {}).get("text", "")))

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[types.Resource(uri="roots://mine", name="mine", mime_type="text/plain")]
        )

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                text = _uris(await ctx.session.list_roots())
        except Exception as exc:
            text = f"no roots: {exc}"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), text=text)]
        )

    return Server(
        "sampler",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve Streamable HTTP on this port")
    parser.add_argument("--sampling-only", action="store_true")
    parser.add_argument("--roots-only", action="store_true")
    args = parser.parse_args()
    server = build_server(args)
    if args.http:
        import uvicorn

        app = server.streamable_http_app(streamable_http_path="/mcp")
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")
        return

    from mcp.server.stdio import stdio_server

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
