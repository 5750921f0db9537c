"""Opening a session to a server whose protocol generation is not known yet: the 2026-07-28
probe (`server/discover`), and the older initialize handshake when the probe kills the server.

More: docs/workers.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from workers.adapters.mcp_client import (
    Deadlines,
    McpConnection,
    McpFailure,
    Target,
    ToolsWatch,
    connect,
)

logger = logging.getLogger(__name__)

# What a probe that ended the server looks like (anything else is a verdict of its own: a
# timeout or a refused connection is not evidence about the protocol generation).
PROBE_FAILURES = frozenset({"closed", "protocol"})


@contextlib.asynccontextmanager
async def connect_negotiated(
    target: Target,
    *,
    deadlines: Deadlines | None = None,
    mode: str = "auto",
    watch_tools: ToolsWatch | None = None,
) -> AsyncIterator[McpConnection]:
    """`connect`, and with `mode="auto"` once more with the handshake when the 2026-07-28 probe
    ended the connection (the handshake's failure is the one raised if both fail)."""
    if mode != "auto":
        async with connect(
            target,
            deadlines=deadlines,
            mode=mode,
            watch_tools=watch_tools,
        ) as connection:
            yield connection
        return
    stack = contextlib.AsyncExitStack()
    try:
        connection = await stack.enter_async_context(
            connect(
                target,
                deadlines=deadlines,
                mode="auto",
                watch_tools=watch_tools,
            )
        )
    except McpFailure as failure:
        if failure.kind not in PROBE_FAILURES:
            raise
        logger.info(
            "%s ended the connection on the 2026-07-28 probe (%s); trying the handshake",
            target.describe(),
            failure.message,
        )
        connection = await stack.enter_async_context(
            connect(
                target,
                deadlines=deadlines,
                mode="legacy",
                watch_tools=watch_tools,
            )
        )
    async with stack:
        yield connection
