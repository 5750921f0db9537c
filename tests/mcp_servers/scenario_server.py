"""A configurable MCP server for the tests, written with the SDK's low-level Server.

It serves stdio by default, or Streamable HTTP / legacy SSE on 127.0.0.1. Flags make it
misbehave the ways real servers do: never answer, crash mid-call, print garbage on stdout, list
10,000 tools or a 2 MB schema, or serve tool definitions from a file the test rewrites between
two discoveries (a rug pull).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

PAGE_SIZE = 500


def _echo_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": "echo",
            "description": "Return the text it was given.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        },
        {
            "name": "add",
            "description": "Add two integers.",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
        {
            "name": "sleep",
            "description": "Sleep for a number of seconds, then answer.",
            "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
        },
    ]


MEMORY_TOOLS = [
    {
        "name": "remember",
        "description": "Remember a text (in this process).",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "recall",
        "description": "Everything this process was told to remember.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
]
_memory: list[str] = []
_announced: dict[str, str] = {}  # --announce-changes: the tools file as last told
_changes = InMemorySubscriptionBus()  # 2026-07-28 clients hear of changes on a listen stream


async def _announce_tools_changed(ctx: Any) -> None:
    """Tell the client its tools changed: on its listen stream (2026-07-28), or with
    `notifications/tools/list_changed` (handshake)."""
    await _changes.publish(ToolsListChanged())
    with contextlib.suppress(Exception):  # a 2026-07-28 session has no such notification
        await ctx.session.send_tool_list_changed()


WHOAMI_TOOL = {
    "name": "whoami",
    "description": "Who is calling, from the identity token Toolroom signed.",
    "inputSchema": {"type": "object", "properties": {}},
    "annotations": {"readOnlyHint": True},
}

META_TOOL = {
    "name": "meta",
    "description": "The _meta this call arrived with, as JSON (e.g. the trace context).",
    "inputSchema": {"type": "object", "properties": {}},
    "annotations": {"readOnlyHint": True},
}


LEAK_TOOLS = [
    {
        "name": name,
        "description": "Fail, echoing the credentials the call arrived with (a careless server).",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    }
    for name in ("leak_error", "leak_failure")
]
CONFIRM_TOOL = {
    "name": "confirm",
    "description": "Ask the user to confirm (elicitation), then say what they answered.",
    "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["ok"],
}


async def _confirm(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | Any:
    """Ask mid-call: `elicitation/create` on the handshake, `input_required` on 2026-07-28."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    what = str((params.arguments or {}).get("what", "this"))
    message = f"Go ahead with {what}?"
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        answer = (params.input_responses or {}).get("confirm")
        if answer is None:
            return types.InputRequiredResult(
                input_requests={
                    "confirm": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=message, requested_schema=CONFIRM_SCHEMA
                        )
                    )
                }
            )
        data = answer.model_dump(by_alias=True, exclude_none=True, mode="json")
    else:
        try:
            elicited = await ctx.session.elicit_form(
                message, CONFIRM_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception as exc:  # the client answered the question with an error
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"not asked: {exc}")],
                is_error=True,
            )
        data = elicited.model_dump(by_alias=True, exclude_none=True, mode="json")
    text = f"{data.get('action')}:{json.dumps(data.get('content'), sort_keys=True)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


LOG_TOOL = {
    "name": "chatty",
    "description": "Log one message at each of debug, info and warning (`pause` seconds before "
    "each), then answer.",
    "inputSchema": {"type": "object", "properties": {"pause": {"type": "number"}}},
    "annotations": {"readOnlyHint": True},
}


async def _chatty(ctx: Any, arguments: dict[str, Any]) -> str:
    """Log during the call, on the call's own stream (the SDK drops, on 2026-07-28, what the
    request did not opt in to)."""
    import warnings

    for level in ("debug", "info", "warning"):
        await anyio.sleep(float(arguments.get("pause", 0)))
        with warnings.catch_warnings():  # logging is deprecated by 2026-07-28, still served
            warnings.simplefilter("ignore")
            await ctx.session.send_log_message(
                level, f"{level} from chatty", "scenario", related_request_id=ctx.request_id
            )
    return "logged"


TASK_TOOL = {
    "name": "research",
    "description": "Research a question at length (it must be called as a task).",
    "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
    "execution": {"taskSupport": "required"},
}


PROGRESS_TOOL = {
    "name": "countdown",
    "description": "Count `steps` steps of `pause` seconds, reporting progress after each "
    "(or none with `quiet`).",
    "inputSchema": {
        "type": "object",
        "properties": {
            "steps": {"type": "integer"},
            "pause": {"type": "number"},
            "quiet": {"type": "boolean"},
        },
    },
    "annotations": {"readOnlyHint": True},
}


async def _countdown(ctx: Any, arguments: dict[str, Any]) -> str:
    """Report progress with the caller's token, on the request's own stream (both generations);
    record a cancellation (the client's `notifications/cancelled`) in `--arrivals`."""
    steps, pause = int(arguments.get("steps", 3)), float(arguments.get("pause", 0.2))
    token = (ctx.meta or {}).get("progress_token")
    for step in range(1, steps + 1):
        await anyio.sleep(pause)
        if token is not None and not arguments.get("quiet"):
            await ctx.session.send_progress_notification(
                token, step, steps, f"step {step} of {steps}", related_request_id=ctx.request_id
            )
    return f"counted {steps} (token {'given' if token is not None else 'none'})"


def _whoami(ctx: Any, params: types.CallToolRequestParams, jwks_url: str, audience: str) -> str:
    """Verify the caller's identity token with a JWT library (PyJWT) against Toolroom's keys:
    from the X-Toolroom-Identity header over HTTP when there is one, else from `_meta`."""
    import jwt

    request = getattr(ctx, "request", None)
    header = request.headers.get("x-toolroom-identity") if request is not None else None
    token = header or (params.meta or {}).get("toolroom/identity")
    if not token:
        raise ValueError("no identity token in the header or _meta")
    key = jwt.PyJWKClient(jwks_url).get_signing_key_from_jwt(token)
    claims = jwt.decode(token, key.key, algorithms=["ES256"], audience=audience, issuer="toolroom")
    return json.dumps({**claims, "via": "header" if header else "meta"}, sort_keys=True)


def _definitions(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.tools_file:
        return list(json.loads(Path(args.tools_file).read_text()))
    tools = _echo_tools() + (MEMORY_TOOLS if args.memory else [])
    if args.verify_identity:
        tools.append(WHOAMI_TOOL)
    if args.echo_meta:
        tools.append(META_TOOL)
    if args.elicit:
        tools.append(CONFIRM_TOOL)
    if args.progress:
        tools.append(PROGRESS_TOOL)
    if args.log:
        tools.append(LOG_TOOL)
    if args.task_tool:
        tools.append(TASK_TOOL)
    if args.leak_secret:
        tools.extend(LEAK_TOOLS)
    if args.tool_count:
        tools = [
            {
                "name": f"tool_{index:05d}",
                "description": f"Generated tool number {index}.",
                "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
            }
            for index in range(args.tool_count)
        ]
    if args.schema_bytes:
        field = {
            "type": "string",
            "description": "A field of a very large schema, repeated to make it big.",
        }
        per_field = len(json.dumps({"field_000000": field}))
        properties = {
            f"field_{index:06d}": field for index in range(args.schema_bytes // per_field + 1)
        }
        tools.append(
            {
                "name": "huge",
                "description": "A tool with an enormous input schema.",
                "inputSchema": {"type": "object", "properties": properties},
            }
        )
    return tools


def _item_descriptions(args: argparse.Namespace) -> dict[str, str]:
    """The resource's and the prompt's descriptions from `--items-file`, read on every list (so a
    test changes them while the server runs); none without the file."""
    if not args.items_file:
        return {}
    return dict(json.loads(Path(args.items_file).read_text()))


def _declares_elicitation(ctx: Any) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def build_server(args: argparse.Namespace) -> Server[Any]:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if args.hang_on == "list":
            await anyio.sleep_forever()
        definitions = _definitions(args)
        if args.elicit_only and not _declares_elicitation(ctx):
            # Like server-everything: a tool that asks is offered only to clients that can answer.
            definitions = [d for d in definitions if d["name"] != "confirm"]
        tools = [types.Tool.model_validate(d) for d in definitions]
        start = int(params.cursor) if params and params.cursor else 0
        page = tools[start : start + PAGE_SIZE]
        next_cursor = str(start + PAGE_SIZE) if start + PAGE_SIZE < len(tools) else None
        return types.ListToolsResult(tools=page, next_cursor=next_cursor)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        arguments = params.arguments or {}
        if args.announce_changes and args.tools_file:  # a rug pull, told to the client
            now = Path(args.tools_file).read_text()
            if _announced.setdefault("tools", now) != now:
                _announced["tools"] = now
                await _announce_tools_changed(ctx)
        if args.arrivals:  # when each call arrived, for tests that time retries
            with Path(args.arrivals).open("a") as arrivals:
                arrivals.write(f"{time.time()} {params.name}\n")
        if params.name == "confirm" and args.elicit:
            return await _confirm(ctx, params)
        if params.name == "chatty" and args.log:
            text = await _chatty(ctx, arguments)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "countdown" and args.progress:
            try:
                text = await _countdown(ctx, arguments)
            except anyio.get_cancelled_exc_class():
                if args.arrivals:
                    with Path(args.arrivals).open("a") as arrivals:
                        arrivals.write(f"{time.time()} cancelled\n")
                raise
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name.startswith("leak_") and args.leak_secret:
            request = getattr(ctx, "request", None)
            sent = request.headers.get("authorization", "") if request is not None else ""
            text = f"the upstream API refused the credentials '{sent}'"
            if params.name == "leak_failure":
                from mcp import MCPError

                raise MCPError(types.INVALID_PARAMS, text)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=True
            )
        if args.hang_on == "call":
            await anyio.sleep_forever()
        if args.crash_on_call:
            sys.stderr.write("scenario server: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        if params.name == "echo":
            text = str(arguments.get("text", ""))
        elif params.name == "add":
            text = str(int(arguments["a"]) + int(arguments["b"]))
        elif params.name == "whoami" and args.verify_identity:
            try:
                text = _whoami(ctx, params, args.verify_identity, args.audience)
            except Exception as exc:
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=f"identity refused: {exc}")],
                    is_error=True,
                )
        elif params.name == "meta" and args.echo_meta:
            text = json.dumps(dict(params.meta or {}), default=str)
        elif params.name == "remember" and args.memory:
            _memory.append(str(arguments.get("text", "")))
            text = "remembered"
        elif params.name == "recall" and args.memory:
            text = ",".join(_memory)
        elif params.name == "research" and args.task_tool:  # reached: nobody refused it
            text = "researched without a task"
        elif params.name == "sleep":
            await anyio.sleep(float(arguments.get("seconds", 0)))
            text = "slept"
        else:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"unknown tool {params.name}")],
                is_error=True,
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri="memo://greeting",
                    name="greeting",
                    mime_type="text/plain",
                    description=_item_descriptions(args).get("resource"),
                )
            ]
        )

    async def list_resource_templates(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = (
            [types.ResourceTemplate(uri_template="memo://notes/{id}", name="note")]
            if args.templates
            else []
        )
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def list_prompts(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name="summarise",
                    description=_item_descriptions(args).get("prompt", "Summarise a text."),
                )
            ]
        )

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if args.templates and uri.startswith("memo://notes/"):
            note = uri.removeprefix("memo://notes/")
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, mime_type="text/plain", text=f"note {note} of {args.name}"
                    )
                ]
            )
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=str(params.uri), mime_type="text/plain", text=f"hello from {args.name}"
                )
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        text = (params.arguments or {}).get("text", "")
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(
                    role="user", content=types.TextContent(type="text", text=f"Summarise: {text}")
                )
            ]
        )

    return Server(
        args.name,
        version="1.0.0",
        instructions=args.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_subscriptions_listen=ListenHandler(_changes) if args.announce_changes else None,
    )


def _sse_app(server: Server[Any]) -> Any:
    """The legacy HTTP+SSE transport: GET /sse opens the stream, POST /messages/ sends."""
    from mcp.server.sse import SseServerTransport
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    transport = SseServerTransport("/messages/")

    async def handle_sse(request: Request) -> Response:
        async with transport.connect_sse(request.scope, request.receive, request._send) as (
            read_stream,
            write_stream,
        ):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        return Response()

    return Starlette(
        routes=[
            Route("/sse", endpoint=handle_sse),
            Mount("/messages/", app=transport.handle_post_message),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="scenario")
    parser.add_argument("--instructions", default=None)
    parser.add_argument("--tools-file")
    parser.add_argument(
        "--announce-changes",
        action="store_true",
        help="on a call, send tools/list_changed if the tools file changed since the last",
    )
    parser.add_argument("--tool-count", type=int, default=0)
    parser.add_argument("--schema-bytes", type=int, default=0)
    parser.add_argument("--hang-on", choices=["start", "list", "call"])
    parser.add_argument("--crash-on-call", action="store_true")
    parser.add_argument("--memory", action="store_true", help="add remember/recall tools")
    parser.add_argument("--verify-identity", help="JWKS URL: add a whoami tool that verifies")
    parser.add_argument("--audience", default="", help="the audience whoami expects")
    parser.add_argument("--echo-meta", action="store_true", help="add a meta tool")
    parser.add_argument("--leak-secret", action="store_true", help="add tools that echo creds")
    parser.add_argument("--elicit", action="store_true", help="add a confirm tool that asks")
    parser.add_argument(
        "--elicit-only", action="store_true", help="list confirm only to clients declaring it"
    )
    parser.add_argument("--log", action="store_true", help="add a chatty tool that logs")
    parser.add_argument("--progress", action="store_true", help="add a countdown tool")
    parser.add_argument(
        "--task-tool", action="store_true", help="add a research tool that must be a task"
    )
    parser.add_argument("--templates", action="store_true", help="offer a resource template")
    parser.add_argument(
        "--items-file", help='JSON {"resource": ..., "prompt": ...}: descriptions, read per list'
    )
    parser.add_argument("--arrivals", help="append each tools/call's arrival time to this file")
    parser.add_argument("--garbage", action="store_true", help="print only garbage on stdout")
    parser.add_argument("--stderr-lines", type=int, default=0)
    parser.add_argument("--http", type=int, help="serve Streamable HTTP on this port")
    parser.add_argument("--sse", type=int, help="serve legacy SSE on this port")
    args = parser.parse_args()

    for index in range(args.stderr_lines):
        sys.stderr.write(f"scenario server stderr line {index}\n")
    sys.stderr.flush()
    if args.hang_on == "start":
        time.sleep(3600)
    if args.garbage:
        while True:
            sys.stdout.write("this is not JSON-RPC {{{\n")
            sys.stdout.flush()
            time.sleep(0.05)

    server = build_server(args)
    if args.http:
        import uvicorn

        app = server.streamable_http_app(streamable_http_path="/mcp")
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")
        return
    if args.sse:
        import uvicorn

        uvicorn.run(_sse_app(server), host="127.0.0.1", port=args.sse, log_level="warning")
        return

    from mcp.server.stdio import stdio_server

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
