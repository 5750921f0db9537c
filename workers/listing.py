"""Listing what an open MCP session offers (tools, resources, prompts) as a discovery outcome;
shared by ephemeral discovery (workers/discovery.py) and warm runtimes (workers/runtime.py)."""

from __future__ import annotations

import time

from registry.servers.jobs.discovery import DiscoveryOutcome
from workers.adapters.mcp_client import McpConnection, McpFailure, elapsed_ms


async def list_everything(
    connection: McpConnection, *, timings: dict[str, float], via: str
) -> DiscoveryOutcome:
    """List tools, resources and prompts on an open session."""
    start = time.perf_counter()
    tools = await connection.list_tools()
    timings["list_tools"] = elapsed_ms(start)
    start = time.perf_counter()
    resources = await connection.list_resources()
    timings["list_resources"] = elapsed_ms(start)
    start = time.perf_counter()
    prompts = await connection.list_prompts()
    timings["list_prompts"] = elapsed_ms(start)
    identity = connection.identity
    return DiscoveryOutcome(
        ok=True,
        protocol_version=identity.protocol_version,
        server_info=identity.server_info,
        capabilities=identity.capabilities,
        instructions=identity.instructions,
        tools=tools,
        resources=resources,
        prompts=prompts,
        timings_ms=timings,
        stderr_tail=connection.stderr_tail(),
        via=via,
    )


def failed_outcome(failure: McpFailure, *, timings: dict[str, float], via: str) -> DiscoveryOutcome:
    return DiscoveryOutcome(
        ok=False,
        error=failure.describe(),
        error_kind=failure.kind,
        stderr_tail=failure.stderr_tail,
        timings_ms=timings,
        via=via,
    )
