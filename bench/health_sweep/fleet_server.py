"""Many Streamable HTTP MCP servers in one process, for the health-sweep benchmark.

One low-level `mcp.server.lowlevel.Server` (three small tools) behind one
`StreamableHTTPSessionManager`, reachable at /s0000/mcp ... /sNNNN/mcp on one port. Every path is
a separate server as far as the registry knows (its own McpServer row and URL); they share the
handler code. Run on its own so its CPU use is visible:

    python bench/health_sweep/fleet_server.py --port 8765 [--stateless] [--json-response]

GET /stats answers the request counts per MCP method, so the benchmark can say how many HTTP
requests one health check costs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

PATH = re.compile(r"^/s(\d{4,6})/mcp$")

TOOLS = [
    types.Tool(
        name="echo",
        description="Return the text it was given.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    types.Tool(
        name="now",
        description="The current time.",
        input_schema={"type": "object", "properties": {}},
    ),
]


def build_app(*, servers: int, stateless: bool, json_response: bool) -> Any:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    server: Server[Any] = Server("bench-fleet", version="1.0.0", on_list_tools=list_tools)
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=stateless,
        json_response=json_response,
        # Loopback only; the client sends Host: 127.0.0.1:<port>, which this would allow anyway.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    counts: Counter[str] = Counter()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        match = PATH.match(path)
        if match is not None and int(match.group(1)) < servers:
            counts[f"{scope['method']} mcp"] += 1
            await manager.handle_request(scope, receive, send)
            return
        if path == "/stats":
            body = json.dumps(dict(counts)).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        async with manager.run():
            yield

    async def lifespan(receive: Any, send: Any) -> None:
        stack = contextlib.AsyncExitStack()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await stack.enter_async_context(running())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json-response", action="store_true")
    args = parser.parse_args()
    app = build_app(
        servers=args.servers, stateless=args.stateless, json_response=args.json_response
    )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=4096,
        timeout_keep_alive=5,
    )


if __name__ == "__main__":
    main()
