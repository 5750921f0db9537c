"""Health checks: probe servers concurrently (bounded) and record the outcomes in one batch."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import anyio
import httpx2
from django.conf import settings

from registry.core.mcp_sign_in import HTTP_UNAUTHORIZED, unauthenticated_initialize
from registry.servers.jobs.health import HealthResult, health_record
from registry.servers.jobs.launch import LaunchPlan, server_launch_plan
from registry.servers.models import McpServer
from workers.adapters.guarded_http import guarded_transport
from workers.adapters.mcp_client import (
    McpConnection,
    McpFailure,
    Target,
    elapsed_ms,
)
from workers.adapters.negotiation import connect_negotiated
from workers.discovery_account import oauth_challenge, plan_with_discovery_token
from workers.launch import health_deadlines, session_mode, target_for


async def probe(connection: McpConnection, plan: LaunchPlan) -> list[dict[str, Any]] | None:
    """The server's chosen probe: tools/list, ping where the protocol has it, or a tool call.

    Every probe ends with the tools listed, whose definitions the registry compares with the
    approved ones (a rug pull is caught within one health interval, issue 26); None when that
    list failed after another probe passed (the server is still healthy)."""
    if plan.health_check_method == "tools_list" or not (
        (plan.health_check_method == "ping" and connection.has_ping)
        or (plan.health_check_method == "tool_call" and plan.health_check_tool)
    ):
        return await connection.list_tools()
    if plan.health_check_method == "ping":
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
    try:
        return await connection.list_tools()
    except McpFailure:
        return None


async def _connect_and_probe(
    target: Target, plan: LaunchPlan, mode: str
) -> list[dict[str, Any]] | None:
    deadlines = health_deadlines(plan)
    async with connect_negotiated(target, deadlines=deadlines, mode=mode) as connection:
        return await probe(connection, plan)


async def _asks_for_sign_in(plan: LaunchPlan, timeout: float) -> None:
    """A per-person server with no admin's account linked for discovery has no credential of
    Toolroom's own: it is healthy when it answers
    an unauthenticated initialize with 401 (asking each person to sign in), as the
    specification says a protected MCP server does."""
    body = unauthenticated_initialize("toolroom-health")
    transport = guarded_transport(allowed_networks=plan.allowed_networks)
    try:
        async with httpx2.AsyncClient(
            transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
        ) as client:
            answer = await client.post(
                plan.url, json=body, headers={"Accept": "application/json, text/event-stream"}
            )
    except httpx2.HTTPError as exc:
        raise McpFailure("connect", f"Could not reach {plan.name or plan.slug}: {exc}") from exc
    if answer.status_code != HTTP_UNAUTHORIZED:
        raise McpFailure(
            "protocol",
            f"A per-person server must ask for each person's sign-in (HTTP 401) without a "
            f"token; it answered HTTP {answer.status_code}.",
        )


async def check_plan(plan: LaunchPlan) -> HealthResult:
    """Connect, probe and close, all within the server's health-check timeout."""
    timeout = float(plan.health_check_timeout_seconds)
    if plan.upstream_auth in ("person_oauth", "person_secret") and not plan.upstream_token:
        start = time.perf_counter()
        try:
            with anyio.fail_after(timeout + 1):
                await _asks_for_sign_in(plan, timeout)
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
    try:
        # Preparing a sandboxed server's image (built once, then reused) is not the server's
        # latency: it happens before the clock starts.
        target = await target_for(plan)
    except McpFailure as failure:
        return HealthResult(plan.server_id, ok=False, error=failure.describe())
    start = time.perf_counter()
    # The version the last discovery negotiated, adopted without a probe: one request less.
    mode = session_mode(plan)
    try:
        with anyio.fail_after(timeout + 1):
            try:
                tools = await _connect_and_probe(target, plan, mode)
            except McpFailure as failure:
                if mode == "auto" or failure.kind != "protocol":
                    raise
                # The server no longer speaks what it negotiated before: negotiate again.
                tools = await _connect_and_probe(target, plan, "auto")
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
    return HealthResult(plan.server_id, ok=True, latency_ms=elapsed_ms(start), tools=tools)


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


def health_plans(servers: Iterable[McpServer]) -> list[LaunchPlan]:
    """The servers' launch plans; a per-person server's with the token of the admin's account
    linked for its discovery (a full probe, tools compared), else without (it must ask for
    sign-in)."""
    return [plan_with_discovery_token(server_launch_plan(server=server))[0] for server in servers]


def health_check_refused_again(
    plans: list[LaunchPlan], results: list[HealthResult]
) -> list[HealthResult]:
    """A per-person server that refused the discovery account's token (401): the token is
    refreshed once in place of the refused one (as a call's would be) and the server checked
    again; a refused refresh says to re-link. Outside any event loop (it queries)."""
    by_id = {plan.server_id: plan for plan in plans}
    checked: list[HealthResult] = []
    for result in results:
        plan = by_id.get(result.server_id)
        if result.ok or plan is None or not plan.upstream_token:
            checked.append(result)
            continue
        if anyio.run(oauth_challenge, plan) is None:  # failed for another reason
            checked.append(result)
            continue
        fresh, unusable = plan_with_discovery_token(plan, refused=plan.upstream_token)
        if unusable is not None:
            checked.append(HealthResult(plan.server_id, ok=False, error=unusable.message))
            continue
        checked.append(anyio.run(check_plan, fresh))
    return checked


def run_health_batch(server_ids: list[int]) -> list[HealthResult]:
    plans = health_plans(McpServer.objects.filter(pk__in=server_ids))
    results = anyio.run(
        lambda: check_plans(plans, concurrency=settings.TOOLROOM_HEALTH_CONCURRENCY)
    )
    results = health_check_refused_again(plans, results)
    health_record(results=results)
    return results
