"""Sandbox benchmark: cold start and warm calls, sandboxed container vs local process, in one run.

    .venv/bin/python bench/sandbox/run.py [--cold 5] [--calls 300]

For the same server (the small SDK server of tests/sandbox_servers/honest.py, and the published
mcp-server-time), it measures side by side, alternating local and sandboxed runs:

- cold start: from opening the transport to the first `tools/list` answer; for the sandbox also
  when the server's process started (the engine's StartedAt), which splits the cold start into the
  container's own overhead (create, attach, start: before the process runs) and the server's own
  start-up inside the container (from its start to its first answer);
- the proxied mode twice: a server's first session, which makes its network and egress proxy
  (a pool of its own per run, closed with the session), and a restart, which finds them kept
  from the session before (one pool for all runs, warmed by one session not measured);
- warm calls: the latency of one tool call on an open session, median and p95 over `--calls`
  calls, the two sessions open at once and the calls alternating between them.

The container gets the machine's CPUs (2) so that the server's own start-up is comparable; the
images come from scripts/ensure-sandbox-image. Prints a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.sandbox_images import ensure_test_images  # noqa: E402
from workers.adapters.sandbox import (  # noqa: E402
    ContainerSpec,
    EgressPool,
    SandboxTransport,
    connect_engine,
    engine_version,
    sandbox_transport,
)
from workers.adapters.sandbox.engine import Engine  # noqa: E402

WARM_TARGET = 1.3  # sandboxed warm call <= 1.3x local
COLD_OVERHEAD_TARGET = 0.5  # seconds of container overhead, the server's own start-up excluded


@dataclass
class Case:
    name: str
    local: StdioServerParameters
    spec: ContainerSpec
    tool: str
    arguments: dict[str, Any]
    # proxied only: "first" (network and proxy made per run) or "restart" (kept from before)
    egress: str = ""


@dataclass
class ColdRun:
    total: float
    overhead: float = 0.0  # sandbox only: opening the transport -> the server's process started
    teardown: float = 0.0


@dataclass
class Result:
    case: Case
    local_cold: list[ColdRun] = field(default_factory=list)
    sandbox_cold: list[ColdRun] = field(default_factory=list)
    local_warm: list[float] = field(default_factory=list)
    sandbox_warm: list[float] = field(default_factory=list)


def _started_at(engine: Engine, container_id: str) -> float:
    text = engine.api.inspect_container(container_id)["State"]["StartedAt"]
    # RFC 3339 with nanoseconds: keep microseconds for fromisoformat.
    head, _, rest = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{rest[:6].ljust(6, '0')}+00:00").timestamp()


async def cold_local(case: Case) -> ColdRun:
    started = time.perf_counter()
    async with Client(stdio_client(case.local)) as client:
        await client.list_tools()
        listed = time.perf_counter()
    return ColdRun(total=listed - started, teardown=time.perf_counter() - listed)


async def cold_sandbox(case: Case, engine: Engine, kept: EgressPool) -> ColdRun:
    pool = EgressPool() if case.egress == "first" else kept
    transport = sandbox_transport(case.spec, engine=engine, egress_pool=pool)
    wall_started = time.time()
    started = time.perf_counter()
    async with Client(transport) as client:
        await client.list_tools()
        listed = time.perf_counter()
        assert transport.container_id is not None
        process_started = await anyio.to_thread.run_sync(
            _started_at, engine, transport.container_id
        )
    if pool is not kept:  # a first session's network and proxy go with it, as before the pool
        await anyio.to_thread.run_sync(pool.close, engine)
    return ColdRun(
        total=listed - started,
        overhead=process_started - wall_started,
        teardown=time.perf_counter() - listed,
    )


async def warm(
    local: AbstractAsyncContextManager[Any], sandbox: SandboxTransport, case: Case, calls: int
) -> tuple[list[float], list[float]]:
    """Both sessions open at once, calls alternating one by one: both see the same machine."""
    local_times: list[float] = []
    sandbox_times: list[float] = []
    async with Client(local) as near, Client(sandbox) as far:
        for client in (near, far):  # warm up both: first calls pay for lazy imports
            for _ in range(20):
                await client.call_tool(case.tool, case.arguments)
        for _ in range(calls):
            for client, times in ((near, local_times), (far, sandbox_times)):
                started = time.perf_counter()
                result = await client.call_tool(case.tool, case.arguments)
                times.append(time.perf_counter() - started)
                if result.is_error:
                    raise RuntimeError(f"{case.name}: {case.tool} failed: {result}")
    return local_times, sandbox_times


async def round_trips(
    local: AbstractAsyncContextManager[Any], sandbox: SandboxTransport, count: int
) -> tuple[list[float], list[float]]:
    """JSON-RPC round trips to the stdlib echo, alternating: the transport's own cost."""
    local_times: list[float] = []
    sandbox_times: list[float] = []
    async with local as near, sandbox as far:
        for number in range(count + 20):
            for (read, write), times in ((near, local_times), (far, sandbox_times)):
                message = SessionMessage(
                    JSONRPCRequest(jsonrpc="2.0", id=number, method="echo", params={})
                )
                started = time.perf_counter()
                await write.send(message)
                await read.receive()
                if number >= 20:  # the first ones warm up
                    times.append(time.perf_counter() - started)
    return local_times, sandbox_times


def p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20)[18]


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:.{digits}f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.2f} s"


def table(results: list[Result], floor: tuple[list[float], list[float]], header: list[str]) -> str:
    near, far = statistics.median(floor[0]), statistics.median(floor[1])
    lines = [
        *header,
        "",
        "| server | measure | local process | sandboxed | ratio / overhead | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        (
            f"| stdlib JSON-RPC echo (no MCP) | transport round trip, median of {len(floor[0])} | "
            f"{ms(near, 2)} | {ms(far, 2)} | +{ms(far - near, 2)} | - | - |"
        ),
    ]
    for result in results:
        name = result.case.name
        local_total = statistics.median(r.total for r in result.local_cold)
        box_total = statistics.median(r.total for r in result.sandbox_cold)
        overhead = statistics.median(r.overhead for r in result.sandbox_cold)
        in_box = statistics.median(r.total - r.overhead for r in result.sandbox_cold)
        lines.append(
            f"| {name} | cold start to first tools/list (median of {len(result.local_cold)}) | "
            f"{secs(local_total)} | {secs(box_total)} | +{secs(box_total - local_total)} | - | - |"
        )
        lines.append(
            f"| {name} | server's own start-up (local: whole cold start; sandboxed: process "
            f"start -> first answer) | {secs(local_total)} | {secs(in_box)} | - | - | - |"
        )
        met = "yes" if overhead <= COLD_OVERHEAD_TARGET else "NO"
        lines.append(
            f"| {name} | container overhead before the server runs (create, attach, start) | - "
            f"| {secs(overhead)} | {secs(overhead)} | <= {COLD_OVERHEAD_TARGET} s | {met} |"
        )
        if result.local_warm:
            for label, pick in (("median", statistics.median), ("p95", p95)):
                near, far = pick(result.local_warm), pick(result.sandbox_warm)
                ratio = far / near
                met = "yes" if ratio <= WARM_TARGET else "NO"
                lines.append(
                    f"| {name} | warm {result.case.tool} call, {label} of "
                    f"{len(result.local_warm)} | {ms(near)} | {ms(far)} | {ratio:.2f}x "
                    f"| <= {WARM_TARGET}x | {met} |"
                )
        teardown_local = statistics.median(r.teardown for r in result.local_cold)
        teardown_box = statistics.median(r.teardown for r in result.sandbox_cold)
        lines.append(
            f"| {name} | close (stdin closed -> process gone; sandbox: container removed) | "
            f"{secs(teardown_local)} | {secs(teardown_box)} | - | - | - |"
        )
    return "\n".join(lines)


async def main(cold_runs: int, calls: int) -> None:
    engine = connect_engine()
    images = ensure_test_images(engine, say=lambda _line: None)
    limits: dict[str, Any] = {"memory_mb": 512, "cpus": 2.0, "pids_limit": 128}
    honest_path = ROOT / "tests" / "sandbox_servers" / "honest.py"
    cases = [
        Case(
            name="SDK server (honest.py)",
            local=StdioServerParameters(command=sys.executable, args=[str(honest_path)]),
            spec=ContainerSpec(
                server_key="bench-honest",
                image=images.servers.reference,
                argv=["python3", "/opt/servers/honest.py"],
                **limits,
            ),
            tool="echo",
            arguments={"text": "hello"},
        ),
        Case(
            name="mcp-server-time (PyPI)",
            local=StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"]),
            spec=ContainerSpec(server_key="bench-time", image=images.time_server.digest, **limits),
            tool="get_current_time",
            arguments={"timezone": "UTC"},
        ),
    ]
    proxied = [
        Case(
            name=f"SDK server, proxied network, {label}",
            local=cases[0].local,
            spec=ContainerSpec(
                server_key=f"bench-proxied-{egress}",
                image=images.servers.reference,
                argv=["python3", "/opt/servers/honest.py"],
                network_mode="proxied",
                egress_allowlist=["example.invalid:443"],
                **limits,
            ),
            tool="echo",
            arguments={"text": "hello"},
            egress=egress,
        )
        for egress, label in (
            ("first", "first session (makes network and proxy)"),
            ("restart", "restart (network and proxy kept)"),
        )
    ]
    kept = EgressPool()
    # The session before the restarts: it makes the network and proxy they find.
    await cold_sandbox(proxied[1], engine, kept)
    results: list[Result] = []
    for case in [*cases, *proxied]:
        result = Result(case)
        for _ in range(cold_runs):
            result.local_cold.append(await cold_local(case))
            result.sandbox_cold.append(await cold_sandbox(case, engine, kept))
        if not case.egress:
            result.local_warm, result.sandbox_warm = await warm(
                stdio_client(case.local), sandbox_transport(case.spec, engine=engine), case, calls
            )
        results.append(result)
        print(f"measured {case.name}", file=sys.stderr)
    floor = await round_trips(
        stdio_client(
            StdioServerParameters(
                command=sys.executable,
                args=[str(ROOT / "tests" / "sandbox_servers" / "jsonrpc_echo.py")],
            )
        ),
        sandbox_transport(
            ContainerSpec(
                server_key="bench-echo",
                image=images.servers.reference,
                argv=["python3", "/opt/servers/jsonrpc_echo.py"],
                **limits,
            ),
            engine=engine,
        ),
        calls,
    )
    await anyio.to_thread.run_sync(kept.close, engine)
    header = [
        (
            f"Measured {datetime.now().astimezone():%Y-%m-%d %H:%M %Z} on this machine "
            f"(load average {os.getloadavg()[0]:.1f} at the end): "
            f"{engine_version(engine)}, Python {sys.version.split()[0]} (local), {calls} warm "
            f"calls, {cold_runs} cold starts per server, container limits 2 CPUs / 512 MB, "
            "network none unless said."
        ),
    ]
    engine.close()
    print(table(results, floor, header))


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cold", type=int, default=5, help="cold starts per server and side")
    parser.add_argument("--calls", type=int, default=500, help="warm calls per server and side")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    runner: Callable[[int, int], Any] = main
    anyio.run(runner, args.cold, args.calls)
