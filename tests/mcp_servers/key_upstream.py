"""A remote MCP server that takes each person's own API key in a header (what a personal access
token API looks like to Toolroom), written with the official SDK (`MCPServer`): a request without a
known key is answered 401, and its `whoami` tool answers whose key the request carried. It runs in
a thread of the test process (uvicorn) and keeps every header value it received, so a test can
check that one person's key is never sent for another."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from starlette.responses import PlainTextResponse

from tests.mcp_fixtures import free_port


class KeyedUpstream:
    """`keys`: key -> whose it is; the key travels in `header` after `prefix`."""

    def __init__(
        self, keys: dict[str, str], *, header: str = "X-Api-Key", prefix: str = ""
    ) -> None:
        self.keys = keys
        self.header = header.lower()
        self.prefix = prefix
        self.received: list[str] = []  # the header's value on every HTTP request
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.mcp = self._build()  # tests approve the tools at the definitions it lists
        inner: Any = self.mcp.streamable_http_app()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                sent = {
                    name.decode("latin-1").lower(): value.decode("latin-1")
                    for name, value in scope["headers"]
                }
                value = sent.get(self.header, "")
                self.received.append(value)
                if self._whose(value) is None:
                    await PlainTextResponse("unknown key", status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="keyed", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the keyed upstream did not start")
            time.sleep(0.02)

    def _whose(self, value: str) -> str | None:
        if not value.startswith(self.prefix):
            return None
        return self.keys.get(value[len(self.prefix) :])

    def _build(self) -> MCPServer:
        server = MCPServer("upstream-with-keys")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def whoami(ctx: Context) -> str:
            """Whose key this request carried."""
            headers = ctx.headers or {}
            value = next((v for k, v in headers.items() if k.lower() == self.header), "")
            return self._whose(value) or "(nobody)"

        return server

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
