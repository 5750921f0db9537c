"""Building blocks of the gateway tests: a real gateway (uvicorn, in a thread of the test process,
sharing its database and cache settings), SDK clients with an agent token, an approved HTTP
server discovered for real."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import uvicorn
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from registry.gateway import checks
from registry.servers import services as server_services
from registry.servers.models import McpServer, ServerStatus, Tool, Transport
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from tests.mcp_fixtures import free_port
from workers.gateway.app import build_gateway_app


class RunningGateway:
    """`uvicorn_options`: more `uvicorn.Config` arguments; by default uvicorn's proxy headers are
    off, as every Toolroom launcher runs it (`--no-proxy-headers`)."""

    def __init__(self, **uvicorn_options: Any) -> None:
        checks._tables.clear()  # ids repeat from test to test
        self.app = build_gateway_app()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        options = {"proxy_headers": False, **uvicorn_options}
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            **options,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="gateway", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)

    @property
    def recorder(self) -> Any:
        return self.app.state.recorder

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@asynccontextmanager
async def gateway_client(
    url: str,
    token: str,
    *,
    mode: str = "auto",
    headers: dict[str, str] | None = None,
    message_handler: Any = None,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """An SDK client of the gateway, authenticated with an agent token (`client_options`: more
    `Client` arguments, e.g. an elicitation callback)."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
        timeout=httpx2.Timeout(60.0),
    )
    transport = streamable_http_client(url, http_client=http)
    async with (
        http,
        Client(transport, mode=mode, message_handler=message_handler, **client_options) as client,
    ):
        yield client


async def calls_at_once(
    url: str, tool: str, sessions: list[tuple[str, str, str]], calls: int
) -> list[tuple[str, bool, str]]:
    """Every session (whose, token, protocol mode) opened at once, each making `calls` calls of
    `tool` at once: (whose, is_error, text) for every call, in the order they answered."""
    answers: list[tuple[str, bool, str]] = []

    async def session(whose: str, token: str, mode: str) -> None:
        async with gateway_client(url, token, mode=mode) as client:

            async def one() -> None:
                result = await client.call_tool(tool, {})
                answers.append((whose, bool(result.is_error), text_of(result)))

            async with anyio.create_task_group() as group:
                for _ in range(calls):
                    group.start_soon(one)

    async with anyio.create_task_group() as group:
        for whose, token, mode in sessions:
            group.start_soon(session, whose, token, mode)
    return answers


def content_tried(url: str, token: str, *, resource: str, prompt: str) -> tuple[Any, ...]:
    """Through the gateway as `token`: (listed resource URIs, listed prompt names, reading
    `resource`, getting `prompt` with a text): each of the last two "ok" or the refusal's
    message."""

    async def run() -> tuple[Any, ...]:
        async with gateway_client(url, token) as client:
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            answers = []
            for ask in (
                lambda: client.read_resource(resource),
                lambda: client.get_prompt(prompt, {"text": "a memo"}),
            ):
                try:
                    await ask()
                    answers.append("ok")
                except MCPError as error:
                    answers.append(error.message)
            return resources, prompts, *answers

    return anyio.run(run)


def discovered_http_server(
    slug: str, url: str, *, approve: bool = True, protocol_version: str = ""
) -> McpServer:
    """An approved Streamable HTTP server whose tools, resources and prompts were discovered from
    the running server and approved (all of them, unless told otherwise). `protocol_version`: the
    version an earlier discovery negotiated, which this one adopts (e.g. the handshake's)."""
    server = McpServerFactory(slug=slug, transport=Transport.STREAMABLE_HTTP, url=url, command=[])
    if protocol_version:
        ServerStatus.objects.update_or_create(
            server=server, defaults={"protocol_version": protocol_version}
        )
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    discover_inline(server)
    if approve:
        for tool in Tool.objects.filter(server=server, removed_at__isnull=True):
            server_services.tool_approve(actor="test", tool=tool)
        for item in [*server.resources.all(), *server.prompts.all()]:
            server_services.item_approve(actor="test", item=item)
    server.refresh_from_db()
    return server


def text_of(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)
