"""Health checks: probe servers concurrently (bounded) and record the outcomes in one batch."""

from __future__ import annotations

import time

import anyio
from django.conf import settings

from registry.servers.models import McpServer
from registry.servers.operations.health import HealthResult, health_record
from registry.servers.operations.launch import LaunchPlan, server_launch_plan
from workers.adapters.mcp_client import (
    McpConnection,
    McpFailure,
    Target,
    connect,
    elapsed_ms,
    mode_for,
)
from workers.launch import health_deadlines, target_for


async def probe(connection: McpConnection, plan: LaunchPlan) -> None:
    """The server's chosen probe: tools/list, ping where the protocol has it, or a tool call."""
    if plan.health_check_method == "ping" and connection.has_ping:
        await connection.ping()
    elif plan.health_check_method == "tool_call" and plan.health_check_tool:
        result = await connection.call_tool(
            plan.health_check_tool,
            plan.health_check_arguments,
            timeout=plan.health_check_timeout_seconds,
        )
        if result.get("isError"):
            text = " ".join(
                str(part.get("text", ""))
                for part in result.get("content", [])
                if isinstance(part, dict)
            )
            raise McpFailure(
                "protocol", f"The health-check tool answered with an error: {text[:300]}"
            )
    else:
        await connection.list_tools()


async def _connect_and_probe(target: Target, plan: LaunchPlan, mode: str) -> None:
    async with connect(target, deadlines=health_deadlines(plan), mode=mode) as connection:
        await probe(connection, plan)


async def check_plan(plan: LaunchPlan) -> HealthResult:
    """Connect, probe and close, all within the server's health-check timeout."""
    timeout = float(plan.health_check_timeout_seconds)
    try:
        # Preparing a sandboxed server's image (built once, then reused) is not the server's
        # latency: it happens before the clock starts.
        target = await target_for(plan)
    except McpFailure as failure:
        return HealthResult(plan.server_id, ok=False, error=failure.describe())
    start = time.perf_counter()
    # The version the last discovery negotiated, adopted without a probe: one request less.
    mode = mode_for(plan.protocol_version)
    try:
        with anyio.fail_after(timeout + 1):
            try:
                await _connect_and_probe(target, plan, mode)
            except McpFailure as failure:
                if mode == "auto" or failure.kind != "protocol":
                    raise
                # The server no longer speaks what it negotiated before: negotiate again.
                await _connect_and_probe(target, plan, "auto")
    except McpFailure as failure:
        return HealthResult(
            plan.server_id, ok=False, latency_ms=elapsed_ms(start), error=failure.describe()
        )
    except TimeoutError:
        return HealthResult(
            plan.server_id,
            ok=False,
            latency_ms=elapsed_ms(start),
            error=f"The health check took longer than {timeout:g} s.",
        )
    return HealthResult(plan.server_id, ok=True, latency_ms=elapsed_ms(start))


async def check_plans(plans: list[LaunchPlan], *, concurrency: int) -> list[HealthResult]:
    results: list[HealthResult] = []
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(plan: LaunchPlan) -> None:
        async with limiter:
            results.append(await check_plan(plan))

    async with anyio.create_task_group() as group:
        for plan in plans:
            group.start_soon(one, plan)
    return results


def run_health_batch(server_ids: list[int]) -> list[HealthResult]:
    servers = McpServer.objects.filter(pk__in=server_ids)
    plans = [server_launch_plan(server=server) for server in servers]
    results = anyio.run(
        lambda: check_plans(plans, concurrency=settings.TOOLROOM_HEALTH_CONCURRENCY)
    )
    health_record(results=results)
    return results
