"""A rug pull caught on the session that sees it: a pooled or warm session's tool definitions,
checked on open and on the server's tools/list_changed (more: docs/workers.md, "Module notes")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from registry.access.rules import DEFINITION_CHANGED
from registry.servers.jobs.drift import listed_hashes, tool_definitions_drift
from registry.servers.jobs.launch import LaunchPlan
from workers.adapters.mcp_client import McpConnection, McpFailure, ToolsWatch
from workers.orm import orm_in_thread

logger = logging.getLogger(__name__)

QUIET_SECONDS = 2.0
OPEN_LIST_SECONDS = 10.0  # a server that will not list does not hold its session's calls longer
SESSION_OPEN = "session_open"
LIST_CHANGED = "list_changed"

Tools = list[dict[str, Any]]
# The registry's check: (server id, the tools listed, what saw them) -> the tools whose approval
# ended. The gateway runs it through its port in a thread, a runtime worker in a thread of its own.
Check = Callable[[int, Tools, str], Awaitable[list[str]]]
# How a session runs work on its connection (UpstreamSession.request, WarmRuntime.request).
Request = Callable[[Callable[[McpConnection], Awaitable[Tools]]], Awaitable[Tools]]


def definition_changed(listed: dict[str, str] | None, tool: str, expected: str) -> bool:
    """Whether a session that listed `listed` (name -> definition hash; None: not listed) lists
    `tool` with another definition than `expected`, the one the call was allowed for ("": the
    caller did not say, nothing to compare)."""
    return bool(expected) and listed is not None and listed.get(tool, expected) != expected


class DefinitionChanged(Exception):
    """A call refused before it was sent: its session lists the tool with another definition
    than the approved one the call was allowed for (a rug pull seen on that session)."""

    code = DEFINITION_CHANGED  # the catalogue's refusal code of a changed tool

    def __init__(self, tool: str) -> None:
        super().__init__(
            f"the server now describes {tool} differently from the approved definition; its "
            "approval ended until an admin approves the new one."
        )
        self.message = str(self)


async def worker_definitions_checked(server_id: int, tools: Tools, seen_by: str) -> list[str]:
    """The check as a runtime worker runs it (the gateway's goes through its port)."""
    return await orm_in_thread(
        tool_definitions_drift,
        server_id=server_id,
        tools=tools,
        actor=f"worker:runtime:{seen_by}",
    )


class DefinitionWatch:
    """The definition checks of one process's sessions (a gateway's pool, a runtime worker)."""

    def __init__(self, check: Check, *, quiet_seconds: float = QUIET_SECONDS) -> None:
        self.check = check
        self.quiet_seconds = quiet_seconds
        self._latest: dict[int, Callable[[], Awaitable[Tools]]] = {}
        self._running: dict[int, asyncio.Task[None]] = {}

    async def opened(self, server_id: int, connection: McpConnection) -> dict[str, str] | None:
        """A session just opened: list its tools and have them checked before it takes calls.
        Returns the listed hashes (None: the server would not list; nothing is checked)."""
        try:
            with anyio.fail_after(OPEN_LIST_SECONDS):
                tools = await connection.list_tools()
        except (McpFailure, TimeoutError) as exc:
            logger.info("no definition check on opening a session to server %s: %s", server_id, exc)
            return None
        await self._check(server_id, tools, SESSION_OPEN)
        return listed_hashes(tools)

    def listener(
        self,
        plan: LaunchPlan,
        request: Request,
        listed: Callable[[dict[str, str]], None] | None = None,
    ) -> ToolsWatch:
        """What a session passes to `connect`: when its server says its tools changed, they are
        listed again through `request` (and their hashes given to `listed`) and checked."""
        server_id = plan.server_id

        async def relist() -> Tools:
            tools = await request(lambda connection: connection.list_tools())
            if listed is not None:
                listed(listed_hashes(tools))
            return tools

        return ToolsWatch(
            changed=lambda: self.changed(server_id, relist),
            recorded_capabilities=plan.capabilities,
        )

    def changed(self, server_id: int, relist: Callable[[], Awaitable[Tools]]) -> None:
        """The server said its tools changed: `relist` lists them on its session. Never blocks
        (it runs on the session's read loop)."""
        self._latest[server_id] = relist
        if server_id not in self._running:
            task = asyncio.get_running_loop().create_task(self._recheck(server_id))
            self._running[server_id] = task

    async def _recheck(self, server_id: int) -> None:
        try:
            while (relist := self._latest.pop(server_id, None)) is not None:
                try:
                    tools = await relist()
                except Exception as exc:  # the session went away meanwhile: the next open checks
                    logger.info("could not list server %s's changed tools: %s", server_id, exc)
                else:
                    await self._check(server_id, tools, LIST_CHANGED)
                await asyncio.sleep(self.quiet_seconds)
        finally:
            self._running.pop(server_id, None)

    async def _check(self, server_id: int, tools: Tools, seen_by: str) -> None:
        try:
            ended = await self.check(server_id, tools, seen_by)
        except Exception as exc:  # the registry is away: the next open, change or health check
            logger.warning("could not check server %s's tool definitions: %s", server_id, exc)
            return
        if ended:
            logger.warning(
                "server %s changed the definition of %s (%s): approval ended",
                server_id,
                ", ".join(ended),
                seen_by,
            )

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        self._running.clear()
        self._latest.clear()
