"""What a person's OAuth token costs at the gateway against an agent token, side by side in one run.

    .venv/bin/python bench/gateway/person_token.py [--calls 300] [--rounds 3] [--checks 20000]

One Streamable HTTP server (the test suite's scenario server), one team granted it, an agent
token of the team and a person of the team signed in through the authorization server's own
endpoints (Dynamic Client Registration, the consent page, the code exchange: Django's test client,
in this process). The gateway runs as `make run` serves it (uvicorn, its own process).

Two measures, alternating the sides round by round:
- **End to end**: one SDK `Client` (2026-07-28) per side and round calls the echo tool `--calls`
  times, one after the other; latency p50/p95 per side, and the gateway process's CPU seconds per
  call (from /proc).
- **The check itself**, in this process: what the gateway runs per request before the upstream
  call, warm (the token known good at the team's version, the call table kept):
  `CheckedTokens.authenticate` + `call_check`, `--checks` times per side; microseconds per
  request. A person's token adds the person's standing to the identity (read with the token, at
  the team's version) and one rule in the call check.

A bench database (PostgreSQL, `toolroom_bench_person_token_<pid>`) and Redis keys under a prefix
of the run's own are created and removed. Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2

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
from bench.gateway.run import (  # noqa: E402
    SCENARIO,
    free_port,
    setup_world,
    start_gateway,
    wait_http,
)


def person_token() -> str:
    """A person of the bench team, signed in through the real endpoints: their access token."""
    from django.contrib.auth import get_user_model  # noqa: PLC0415
    from django.test import Client as HttpClient  # noqa: PLC0415

    from registry.teams.models import MembershipLevel, Team  # noqa: PLC0415
    from registry.teams.services import team_member_set  # noqa: PLC0415
    from tests.oauth_helpers import register_client, sign_in_tokens  # noqa: PLC0415

    team = Team.objects.get(slug="bench")
    person = get_user_model().objects.create_user(username="bench-person", password="x" * 20)
    team_member_set(actor="bench", team=team, user=person, level=MembershipLevel.OWNER)
    http = HttpClient()
    http.force_login(person)
    client = register_client(HttpClient(), name="Bench editor")
    choice = f"{team.pk}:{team.roles.get(name='operations').pk}"
    return str(sign_in_tokens(http, client, choice)["access_token"])


async def calls_of(url: str, token: str, calls: int) -> list[float]:
    from mcp import Client  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0)
    )
    latencies = []
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        await client.call_tool("web__echo", {"text": "warm"})
        for _ in range(calls):
            started = time.perf_counter()
            await client.call_tool("web__echo", {"text": "hello"})
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def check_cost(token: str, checks: int) -> float:
    """Microseconds per request of the gateway's warm check (token known good + call check)."""
    from registry.gateway.checks import call_check  # noqa: PLC0415
    from workers.gateway.auth import CheckedTokens  # noqa: PLC0415

    checked = CheckedTokens()
    for _ in range(3):  # checked, then confirmed at the team's version, then warm
        principal, version = checked.authenticate(plain=token)
        call_check(identity=principal.caller, name="web__echo", arguments={}, version=version)
    started = time.perf_counter()
    for _ in range(checks):
        principal, version = checked.authenticate(plain=token)
        decision = call_check(
            identity=principal.caller, name="web__echo", arguments={"text": "x"}, version=version
        )
    elapsed = time.perf_counter() - started
    assert decision.allowed, decision.message
    return elapsed / checks * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checks", type=int, default=20_000)
    args = parser.parse_args()
    load_at_start = loadavg()
    with bench_database("postgresql", "person_token") as env:
        django_setup(env)
        migrate()
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
            person = person_token()
            gateway = start_gateway(ROOT, gateway_port, env)
            base = f"http://127.0.0.1:{gateway_port}"
            wait_http(f"{base}/healthz")
            sides = {"agent token": agent, "person's token": person}
            latencies: dict[str, list[float]] = {side: [] for side in sides}
            cpu: dict[str, float] = dict.fromkeys(sides, 0.0)
            checks: dict[str, list[float]] = {side: [] for side in sides}
            for round_number in range(args.rounds):
                order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
                for side in order:
                    before = sum(cpu_of(tree_pids(gateway.pid)).values())
                    latencies[side] += anyio.run(calls_of, f"{base}/mcp", sides[side], args.calls)
                    cpu[side] += sum(cpu_of(tree_pids(gateway.pid)).values()) - before
                    checks[side].append(check_cost(sides[side], args.checks))
        finally:
            if gateway is not None:
                stop_process(gateway)
            stop_process(server)
    calls = args.calls * args.rounds
    rows = []
    for side in sides:
        rows.append(
            [
                side,
                f"{median(latencies[side]):.2f}",
                f"{p95(latencies[side]):.2f}",
                f"{cpu[side] / calls * 1000:.2f}",
                f"{median(checks[side]):.1f}",
            ]
        )
    agent_side, person_side = list(sides)
    print(
        markdown_table(
            [
                "token",
                "call p50 ms",
                "call p95 ms",
                "gateway CPU ms/call",
                "warm check µs/request",
            ],
            rows,
        )
    )
    ratio = median(latencies[person_side]) / median(latencies[agent_side])
    print(
        f"\nperson / agent: p50 {ratio:.3f}x, "
        f"check +{median(checks[person_side]) - median(checks[agent_side]):.1f} µs; "
        f"{calls} calls per side in {args.rounds} alternating rounds; load {load_at_start} -> "
        f"{loadavg()}; {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
