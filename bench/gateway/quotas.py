"""What the quota check costs a gateway call, with quotas against without, side by side in one run.

    .venv/bin/python bench/gateway/quotas.py [--calls 300] [--rounds 4] [--checks 5000]

One Streamable HTTP server (the test suite's scenario server), one team granted it, its agent
token; the gateway runs as `make run` serves it (uvicorn, its own process) on PostgreSQL and the
machine's Redis. The sides alternate round by round, switching the team's quotas in between
(`team_quota_set`, which bumps the team's version as the admin's save does):
- **with quotas**: all six limits set (far above what the bench reaches), so every call runs the
  Lua script that counts calls a minute and takes the concurrent-call leases, and gives its lease
  back at the end (two Redis round trips);
- **without**: every limit 0 (no limit), so the call reads the team's limits (kept in the process
  at the team's version) and nothing else.

Two measures per side:
- **End to end**: one SDK `Client` (2026-07-28) calls the echo tool `--calls` times, one after the
  other; latency p50/p95, and the gateway process's CPU seconds per call (from /proc).
- **The check itself**, in this process: `Quotas.call` entered and left `--checks` times (the
  same Redis; and the in-process counter the embedded default uses without Redis); microseconds
  per call.

A bench database (`toolroom_bench_quotas_<pid>`) and Redis keys under a prefix of the run's own
are created and removed. Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    bench_database,
    cpu_of,
    django_setup,
    loadavg,
    markdown_table,
    median,
    migrate,
    p95,
    stop_process,
    tree_pids,
)
from bench.gateway.person_token import calls_of  # noqa: E402
from bench.gateway.run import (  # noqa: E402
    SCENARIO,
    free_port,
    setup_world,
    start_gateway,
    wait_http,
)

SIDES = ("with quotas", "without")
ON = {
    "sessions_per_team": 100_000,
    "sessions_per_caller": 100_000,
    "calls_per_minute_per_team": 10_000_000,
    "calls_per_minute_per_caller": 10_000_000,
    "concurrent_calls_per_team": 100_000,
    "concurrent_calls_per_caller": 100_000,
}
OFF = dict.fromkeys(ON, 0)


def quotas_set(side: str) -> None:
    from registry.gateway.quotas import team_quota_set  # noqa: PLC0415
    from registry.teams.models import Team  # noqa: PLC0415

    values = ON if side == SIDES[0] else OFF
    team_quota_set(actor="bench", team=Team.objects.get(slug="bench"), **values)


def check_cost(token: str, checks: int, *, redis_url: str | None) -> float:
    """Microseconds per call of entering and leaving `Quotas.call` (the team's quotas as set),
    as the gateway runs it: the team's version given (read with the token), the flusher on."""
    from registry.gateway.listing import team_catalogue_version  # noqa: PLC0415
    from registry.teams.tokens import token_authenticate  # noqa: PLC0415
    from workers.gateway.quotas import Quotas  # noqa: PLC0415

    identity = token_authenticate(token)
    version = team_catalogue_version(team_id=identity.team_id)

    async def run() -> float:
        quotas = Quotas(redis_url=redis_url)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(quotas.run)
                for _ in range(50):  # the limits read at the team's version, the script loaded
                    async with quotas.call(identity, version):
                        pass
                started = time.perf_counter()
                for _ in range(checks):
                    async with quotas.call(identity, version):
                        pass
                elapsed = time.perf_counter() - started
                group.cancel_scope.cancel()
            return elapsed / checks * 1e6
        finally:
            await quotas.close()

    return anyio.run(run)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--checks", type=int, default=5000)
    args = parser.parse_args()
    load_at_start = loadavg()
    with bench_database("postgresql", "quotas") as env:
        django_setup(env)
        migrate()
        from registry.gateway.quotas import quota_redis_url  # noqa: PLC0415

        redis_url = quota_redis_url()
        http_port, gateway_port = free_port(), free_port()
        http_url = f"http://127.0.0.1:{http_port}/mcp"
        server = subprocess.Popen(
            [sys.executable, str(SCENARIO), "--http", str(http_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        gateway = None
        try:
            wait_http(f"http://127.0.0.1:{http_port}/")
            agent = setup_world(http_url, [sys.executable, str(SCENARIO)], None)
            gateway = start_gateway(ROOT, gateway_port, env)
            base = f"http://127.0.0.1:{gateway_port}"
            wait_http(f"{base}/healthz")
            latencies: dict[str, list[float]] = {side: [] for side in SIDES}
            cpu: dict[str, float] = dict.fromkeys(SIDES, 0.0)
            checks: dict[str, list[float]] = {side: [] for side in SIDES}
            memory: dict[str, list[float]] = {side: [] for side in SIDES}
            for round_number in range(args.rounds):
                order = SIDES if round_number % 2 == 0 else tuple(reversed(SIDES))
                for side in order:
                    quotas_set(side)
                    before = sum(cpu_of(tree_pids(gateway.pid)).values())
                    latencies[side] += anyio.run(calls_of, f"{base}/mcp", agent, args.calls)
                    cpu[side] += sum(cpu_of(tree_pids(gateway.pid)).values()) - before
                    checks[side].append(check_cost(agent, args.checks, redis_url=redis_url))
                    memory[side].append(check_cost(agent, args.checks, redis_url=""))
        finally:
            if gateway is not None:
                stop_process(gateway)
            stop_process(server)
    calls = args.calls * args.rounds
    rows: list[list[Any]] = []
    for side in SIDES:
        rows.append(
            [
                side,
                f"{median(latencies[side]):.2f}",
                f"{p95(latencies[side]):.2f}",
                f"{cpu[side] / calls * 1000:.2f}",
                f"{median(checks[side]):.1f}",
                f"{median(memory[side]):.1f}",
            ]
        )
    print(
        markdown_table(
            [
                "side",
                "call p50 ms",
                "call p95 ms",
                "gateway CPU ms/call",
                "check µs/call (Redis)",
                "check µs/call (no Redis)",
            ],
            rows,
        )
    )
    on, off = SIDES
    print(
        f"\nwith / without: p50 +{median(latencies[on]) - median(latencies[off]):.3f} ms, "
        f"p95 +{p95(latencies[on]) - p95(latencies[off]):.3f} ms, "
        f"CPU +{(cpu[on] - cpu[off]) / calls * 1000:.3f} ms/call, check "
        f"+{median(checks[on]) - median(checks[off]):.1f} µs (Redis); {calls} calls per side in "
        f"{args.rounds} alternating rounds; load {load_at_start} -> {loadavg()}; "
        f"{os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
