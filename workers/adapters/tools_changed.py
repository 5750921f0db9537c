"""A server's word that its tools changed, from either protocol generation, as one callback
(more: docs/workers.md, "Module notes")."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolsWatch:
    """Who is told (`changed`, called on the session's own read loop: it must not block, it
    only schedules work), and the capabilities the server declared when it was discovered
    (wire form), for a session that adopted its version without `server/discover`."""

    changed: Callable[[], None]
    recorded_capabilities: Mapping[str, Any] = field(default_factory=dict)


def tools_changed_handler(watch: ToolsWatch | None) -> MessageHandlerFnT | None:
    """The SDK message handler that passes `notifications/tools/list_changed` on (None: none)."""
    if watch is None:
        return None

    async def handler(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            watch.changed()
        await anyio.lowlevel.checkpoint()

    return handler


async def _listen(client: Client, on_tools_changed: Callable[[], None]) -> None:
    try:
        async with client.listen(tools_list_changed=True) as subscription:
            async for _event in subscription:
                on_tools_changed()
    except Exception as exc:  # a server without listen: list_changed is not heard, nothing else
        logger.info("no tools/list_changed stream from the server: %s", exc)


@contextlib.asynccontextmanager
async def listen_tools_changed(
    client: Client, identity: Any, watch: ToolsWatch
) -> AsyncIterator[None]:
    """Hold a `subscriptions/listen` stream for tool changes while the block runs, on a
    2026-07-28 session to a server that declares `tools.listChanged` (in the session, or, for a
    session that adopted its version without `server/discover`, when it was discovered). Else
    nothing."""
    capabilities = identity.capabilities or watch.recorded_capabilities
    tools = capabilities.get("tools") or {}
    if identity.protocol_version not in MODERN_PROTOCOL_VERSIONS or not tools.get("listChanged"):
        yield
        return
    async with anyio.create_task_group() as group:
        group.start_soon(_listen, client, watch.changed)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
