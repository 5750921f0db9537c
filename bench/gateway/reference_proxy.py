"""The thinnest MCP proxy the SDK's parts make: the gateway bench's `reference` side, a floor.

    python bench/gateway/reference_proxy.py --port P (--http URL | --stdio PYTHON SCRIPT)

One upstream SDK `Client` (mode auto), opened at start-up and shared by every caller; the SDK's
low-level `Server` whose `tools/list` and `tools/call` handlers pass straight to it; served as the
gateway is (the SDK's `StreamableHTTPSessionManager` with plain JSON answers, uvicorn on uvloop
and httptools, `gc.freeze()` after start-up). No token, no check, no audit, no pool, no deadline,
no runtime worker: everything the issue asks of the gateway is left out. What this proxy adds to a
direct call is what the SDK's server side and its client side cost, so a gateway built on them
(issue 9: "Built on the official mcp SDK's server side") cannot add less. bench/gateway/run.py
starts it as one more side of a round, beside `direct` and `gateway`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def build_app(upstream_http: str | None, upstream_stdio: list[str] | None) -> Starlette:
    holder: dict[str, Any] = {}

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await holder["client"].list_tools()  # type: ignore[no-any-return]

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await holder["client"].call_tool(params.name, params.arguments or {})  # type: ignore[no-any-return]

    server: Server[Any] = Server(
        "reference-proxy",
        version="1.0.0",
        get_tool_input_schema=lambda name: None,  # as the gateway: no Mcp-Param validation
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=300.0,
    )
    endpoint = StreamableHTTPASGIApp(manager)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": "client" in holder})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if upstream_http is not None:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(timeout=60, trust_env=False)
                )
                transport: Any = streamable_http_client(upstream_http, http_client=http)
            else:
                assert upstream_stdio is not None
                transport = StdioServerParameters(
                    command=upstream_stdio[0], args=upstream_stdio[1:]
                )
            holder["client"] = await stack.enter_async_context(Client(transport))
            await stack.enter_async_context(manager.run())
            gc.collect()
            gc.freeze()
            yield

    return Starlette(
        routes=[
            Route("/mcp", endpoint=endpoint),
            Route("/mcp/", endpoint=endpoint),
            Route("/healthz", endpoint=healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    upstream = parser.add_mutually_exclusive_group(required=True)
    upstream.add_argument("--http", help="the upstream server's Streamable HTTP URL")
    upstream.add_argument("--stdio", nargs="+", help="the upstream server's command line")
    args = parser.parse_args()
    uvicorn.run(
        build_app(args.http, args.stdio),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
