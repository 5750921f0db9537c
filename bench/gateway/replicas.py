"""Gateway scaling benchmark: throughput of 1, 2 and 4 gateway processes behind HAProxy (round
robin, no stickiness), side by side in one run.

    .venv/bin/python bench/gateway/replicas.py [--replicas 1,2,4] [--sessions 16,100]
        [--calls 400] [--mode legacy] [--rounds 2] [--check-timeout 2s]

Every gateway process is started once (served as `make run` serves it, `gateway_command` of
bench/gateway/run.py); one HAProxy (Debian's package, tests/load_balancer.py: the settings of
deploy/haproxy/gateway.cfg) per replica count balances over the first N of them. For each number
of concurrent sessions, rounds alternate over the replica counts (the order flips every other
round); in a round every session (an SDK `Client`, `--mode legacy`: the 2025-11-25 handshake with
`Mcp-Session-Id`, so each session's requests land on every replica and are restored there from
Redis; `--mode auto`: 2026-07-28) makes `--calls / sessions` echo calls (at least 20) one after the
other, all sessions at once. It reports calls per second (all calls over the round's wall time),
p50 and p95 latency, and CPU milliseconds per call of the gateways (all N together), HAProxy, and
this bench process (the calling clients, on the same cores).

The upstream is the test suite's scenario server over Streamable HTTP. A bench PostgreSQL
database `toolroom_bench_replicas_<pid>` and Redis keys under a prefix of the run's own are
created and removed; every process started is stopped. Prints a Markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    REDIS_URL,
    cpu_of,
    django_setup,
    loadavg,
    markdown_table,
    median,
    migrate,
    p95,
    pg_create,
    pg_drop,
    postgres_url,
    redis_cleanup,
    stop_process,
    toolroom_env,
    tree_pids,
)
from bench.gateway.run import (  # noqa: E402
    SCENARIO,
    free_port,
    session_calls,
    setup_world,
    start_gateway,
    wait_http,
)
from tests.load_balancer import LoadBalancer  # noqa: E402


def client_factory(url: str, token: str, mode: str) -> Any:
    from mcp import Client  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

    @asynccontextmanager
    async def open_client() -> Any:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=60, trust_env=False
        )
        transport = streamable_http_client(url, http_client=http)
        async with http, Client(transport, mode=mode) as client:
            client.bench_tool = "web__echo"
            yield client

    return open_client


async def measure(open_client: Any, sessions: int, calls: int) -> tuple[list[float], float]:
    """Latencies of every call, and the wall seconds from the start signal to the last answer."""
    start = anyio.Event()
    results: list[list[float]] = []

    async def one() -> None:
        results.append(await session_calls(open_client, calls, start))

    began = 0.0
    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(one)
        await anyio.sleep(min(10.0, 0.5 + sessions * 0.05))  # let every session open
        began = time.perf_counter()
        start.set()
    return [value for latencies in results for value in latencies], time.perf_counter() - began


def cpu_seconds(processes: list[subprocess.Popen[Any]]) -> float:
    return sum(sum(cpu_of(tree_pids(process.pid)).values()) for process in processes)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--sessions", default="16,100")
    parser.add_argument("--calls", type=int, default=400, help="calls per round, all sessions")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--check-timeout",
        default="2s",
        help="HAProxy's health check timeout (deploy/haproxy/gateway.cfg: 2s); a saturated "
        "replica's /healthz takes longer and the balancer takes it out",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.replicas.split(",")]
    session_counts = [int(n) for n in args.sessions.split(",")]

    pid = os.getpid()
    load_at_start = loadavg()
    prefix = f"toolroom-bench-replicas-{pid}"
    database = f"toolroom_bench_replicas_{pid}"
    pg_create(database)
    env = toolroom_env(database_url=postgres_url(database), key_prefix=prefix)
    django_setup(env)
    migrate()
    full_env = {**os.environ, **env, "TOOLROOM_GATEWAY_JOURNAL_DIR": ""}
    processes: list[subprocess.Popen[Any]] = []
    balancers: dict[int, LoadBalancer] = {}
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    try:
        http_port = free_port()
        http_url = f"http://127.0.0.1:{http_port}/mcp"
        processes.append(
            subprocess.Popen(
                [sys.executable, str(SCENARIO), "--http", str(http_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_http(f"http://127.0.0.1:{http_port}/")
        token = setup_world(http_url, [sys.executable, str(SCENARIO)], None)
        gateways: list[subprocess.Popen[Any]] = []
        ports = []
        for _ in range(max(counts)):
            port = free_port()
            gateways.append(start_gateway(ROOT, port, full_env))
            ports.append(port)
        processes.extend(gateways)
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz")
        for count in counts:
            sub = folder / str(count)
            sub.mkdir()
            balancers[count] = LoadBalancer(ports[:count], sub, check_timeout=args.check_timeout)
            balancers[count].wait_up(count)
        factories = {
            count: client_factory(balancers[count].url, token, args.mode) for count in counts
        }
        for count in counts:  # every gateway opens its pooled upstream session
            anyio.run(measure, factories[count], count * 2, 2)
        for sessions in session_counts:
            calls = max(20, args.calls // sessions)
            found: dict[int, list[float]] = {count: [] for count in counts}
            wall = dict.fromkeys(counts, 0.0)
            spent = {count: {"gateways": 0.0, "haproxy": 0.0, "client": 0.0} for count in counts}
            for round_number in range(args.rounds):
                order = counts if round_number % 2 == 0 else list(reversed(counts))
                for count in order:
                    involved = gateways[:count]
                    before = (
                        cpu_seconds(involved),
                        cpu_seconds([balancers[count].process]),
                        time.process_time(),
                    )
                    latencies, seconds = anyio.run(measure, factories[count], sessions, calls)
                    after = (
                        cpu_seconds(involved),
                        cpu_seconds([balancers[count].process]),
                        time.process_time(),
                    )
                    found[count] += latencies
                    wall[count] += seconds
                    for index, what in enumerate(("gateways", "haproxy", "client")):
                        spent[count][what] += after[index] - before[index]
            for count in counts:
                done = len(found[count])
                rows.append(
                    [
                        args.mode,
                        sessions,
                        count,
                        done,
                        f"{done / wall[count]:.0f}",
                        f"{median(found[count]):.1f}",
                        f"{p95(found[count]):.1f}",
                        f"{spent[count]['gateways'] / done * 1000:.2f}",
                        f"{spent[count]['haproxy'] / done * 1000:.2f}",
                        f"{spent[count]['client'] / done * 1000:.2f}",
                    ]
                )
                print(rows[-1], flush=True)
    finally:
        for balancer in balancers.values():
            balancer.stop()
        for process in reversed(processes):
            stop_process(process)
        redis_cleanup(prefix)
        pg_drop(database)
    print()
    print(
        f"load average at the start: {load_at_start}, at the end: {loadavg()}; "
        f"{os.cpu_count()} cores; Redis {REDIS_URL}"
    )
    print(
        markdown_table(
            [
                "mode",
                "sessions",
                "replicas",
                "calls",
                "calls/s",
                "p50 ms",
                "p95 ms",
                "gateways CPU ms/call",
                "HAProxy CPU ms/call",
                "client CPU ms/call",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
