"""Gateway benchmark: an echo tool called directly with the SDK vs through the gateway, in one run.

    .venv/bin/python bench/gateway/run.py [--calls 200] [--sessions 1,16,100]
        [--kinds http,stdio,sandbox]

Kinds: (a) `http`, a Streamable HTTP server (the test suite's scenario server); (b) `stdio`, the
same server over stdio, held warm by a real runtime worker (Celery, threads pool) and reached
through its private endpoint; (c) `sandbox`, the SDK server tests/sandbox_servers/honest.py in a
sandboxed container (network none; images from scripts/ensure-sandbox-image), held warm by the same
runtime worker. Directly, every session of an `http` or `stdio` round opens its own session (a
process for stdio); the sessions of a `sandbox` round share one container (one SDK `Client`,
requests in flight together), as the gateway's per-team session does: a hundred containers would
measure the machine, not the gateway. For each kind and each number of concurrent sessions it
measures, alternating direct and gateway rounds, the latency of `--calls` echo calls per session
(every session calls one after the other; the sessions run at once), and the gateway process's CPU
seconds per call (from /proc). Both sides use the SDK `Client` in `mode="auto"` (2026-07-28).
It also reports a cold call to each kind (server not running / no pooled session); with
`--cold N`, N more for `stdio` and `sandbox` after the warm rounds (each after stopping the
runtime through the runtime workers), and the column shows their median.

For `stdio` and `sandbox` a third side, `endpoint`, calls the runtime worker's private endpoint
straight from the bench (workers/gateway/runtime_link.py, as the gateway does), which splits the
gateway's added latency into the runtime path and the gateway's MCP front; the runtime worker's
own process CPU per gateway call is a column, and a line per row prints the CPU per call of the
gateway, the runtime worker and this bench process (the calling client) for each side.

`--reference` adds the side `reference`: bench/gateway/reference_proxy.py, the thinnest proxy the
SDK's server side and client side make (no token, no check, no audit; one upstream `Client` shared
by every caller; for `stdio` it holds the server process itself, without a runtime worker). It is
served like the gateway, in the same rounds: what it adds to a direct call is a floor for any
gateway built on the SDK, and its columns show how far the targets are from that floor.

`--compare-tree DIR` also starts the gateway of another checkout (its own `.venv`, served as that
checkout serves it) and measures it as one more side in the same rounds, against the same servers,
database and runtime worker: a before/after in one run. `--rounds N` alternates N rounds of each
side (the gateways' order flips every other round). The gateway is served as `make run` and
docker-compose.yml serve it (`gateway_command`).

A bench PostgreSQL database `toolroom_bench_gateway_<pid>` and Redis keys under a prefix of the
run's own are created and removed. Every process it starts is stopped. Targets (issue 9): added
latency p50 <= 2 ms and p95 <= 5 ms at 1 session, gateway / direct <= 1.5x, p95 < 50 ms at 100
sessions. Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
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

SCENARIO = ROOT / "tests" / "mcp_servers" / "scenario_server.py"
SANDBOXED_ARGV = ["python3", "/opt/servers/honest.py"]
REFERENCE_PROXY = Path(__file__).resolve().parent / "reference_proxy.py"
TOOLS = {"http": "web__echo", "stdio": "local__echo", "sandbox": "boxed__echo"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx2.get(url, timeout=1.0, trust_env=False)
            return
        except httpx2.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def gateway_command(tree: Path, port: int) -> list[str]:
    """How `make run` (scripts/quickstart.py) serves the gateway, with the checkout at `tree` and
    that checkout's own Python (`--log-level warning`: no access log line per call)."""
    python = tree / ".venv" / "bin" / "python"
    command = [str(python) if tree != ROOT else sys.executable, "-m", "uvicorn"]
    command += ["workers.gateway.asgi:application", "--port", str(port), "--log-level", "warning"]
    return command


def start_gateway(tree: Path, port: int, env: dict[str, str]) -> subprocess.Popen[Any]:
    return subprocess.Popen(gateway_command(tree, port), env=env, cwd=tree)


def setup_world(http_url: str, stdio_argv: list[str], sandbox_image: str | None) -> str:
    """Servers discovered and approved, a team granted them, an agent token (printed once)."""
    from registry.gateway.services import server_gateway_policy_set  # noqa: PLC0415
    from registry.servers import services as servers  # noqa: PLC0415
    from registry.servers.jobs.discovery import (  # noqa: PLC0415
        discovery_claim,
        discovery_record,
        discovery_request,
    )
    from registry.servers.jobs.launch import server_launch_plan  # noqa: PLC0415
    from registry.servers.models import Tool  # noqa: PLC0415
    from registry.teams.services import (  # noqa: PLC0415
        agent_token_create,
        grant_create,
        team_create,
    )
    from workers.discovery import discover_plan  # noqa: PLC0415

    team = team_create(actor="bench", slug="bench", name="Bench")
    servers_fields: list[tuple[str, dict[str, Any]]] = [
        ("web", {"transport": "streamable_http", "url": http_url}),
        ("local", {"transport": "stdio", "command": stdio_argv}),
    ]
    if sandbox_image is not None:
        servers_fields.append(
            (
                "boxed",
                {
                    "transport": "stdio",
                    "command": SANDBOXED_ARGV,
                    "isolation": "sandbox",
                    "image": sandbox_image,
                    "network_mode": "none",
                },
            )
        )
    for slug, fields in servers_fields:
        server = servers.server_create(
            actor="bench", slug=slug, name=slug.title(), trust_tier="builtin", **fields
        )
        servers.server_submit_for_review(actor="bench", server=server)
        servers.server_approve(actor="bench", server=server)
        run = discovery_request(server=server, actor="bench", trigger="bench")
        claimed = discovery_claim(run_id=run.pk)
        assert claimed is not None
        discovery_record(
            run=claimed, outcome=anyio.run(discover_plan, server_launch_plan(server=server))
        )
        for tool in Tool.objects.filter(server=server):
            servers.tool_approve(actor="bench", tool=tool)
        # Cold starts of a Python stdio server on a busy machine take seconds.
        server_gateway_policy_set(
            actor="bench", server=server, call_deadline_seconds=60, max_concurrency=128
        )
        grant_create(actor="bench", team=team, server=server)
    role = team.roles.get(name="operations")
    return agent_token_create(actor="bench", team=team, role=role, name="bench").plain


async def session_calls(open_client: Any, calls: int, start: anyio.Event) -> list[float]:
    latencies = []
    async with open_client() as client:
        await start.wait()
        for index in range(calls):
            began = time.perf_counter()
            result = await client.call_tool(client.bench_tool, {"text": f"t{index}"})
            latencies.append((time.perf_counter() - began) * 1000)
            if result.is_error:
                raise RuntimeError(f"call failed: {result.content}")
    return latencies


class _LinkClient:
    """Calls a runtime worker's private endpoint straight from the bench, as the gateway does
    (workers/gateway/runtime_link.py): the runtime path without the gateway's MCP front."""

    def __init__(self, link: Any, server_id: int, scope: str) -> None:
        self.link = link
        self.server_id = server_id
        self.scope = scope
        self.bench_tool = "echo"

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        from types import SimpleNamespace  # noqa: PLC0415

        from workers.adapters.mcp_client import McpFailure  # noqa: PLC0415

        try:
            result = await self.link.call(
                {
                    "server_id": self.server_id,
                    "scope": self.scope,
                    "tool": tool,
                    "arguments": arguments,
                    "timeout": 60.0,
                }
            )
        except McpFailure as failure:
            return SimpleNamespace(is_error=True, content=str(failure))
        return SimpleNamespace(is_error=bool(result.get("isError")), content=result["content"])


def link_factory(kind: str) -> Any:
    """A round's sessions share one RuntimeLink (one connection), as a gateway process does."""
    from contextlib import asynccontextmanager  # noqa: PLC0415

    from registry.gateway.runtimes import (  # noqa: PLC0415
        runtime_endpoint_secret,
        server_runtime_location,
    )
    from registry.servers.models import McpServer  # noqa: PLC0415
    from registry.teams.models import Team  # noqa: PLC0415
    from workers.gateway.runtime_link import RuntimeLink  # noqa: PLC0415

    server_id = McpServer.objects.get(slug=TOOLS[kind].partition("__")[0]).pk
    scope = f"team:{Team.objects.get(slug='bench').pk}"  # the default isolation: per team
    address = server_runtime_location(server_id=server_id).address
    assert address is not None, "the runtime is not running"
    secret = runtime_endpoint_secret()

    @asynccontextmanager
    async def open_one() -> Any:
        link = RuntimeLink(address, secret)
        try:
            yield _LinkClient(link, server_id, scope)
        finally:
            await link.close()

    return shared(open_one)


def client_factory(
    kind: str,
    side: str,
    *,
    http_url: str,
    gateway_url: str,
    token: str,
    sandbox_image: str | None = None,
) -> Any:
    from contextlib import asynccontextmanager  # noqa: PLC0415

    from mcp import Client, StdioServerParameters  # noqa: PLC0415
    from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

    @asynccontextmanager
    async def open_client() -> Any:
        if side == "direct" and kind == "sandbox":
            from workers.adapters.sandbox import ContainerSpec, sandbox_transport  # noqa: PLC0415

            assert sandbox_image is not None
            spec = ContainerSpec(
                server_key=f"bench-gateway-{os.getpid()}",
                image=sandbox_image,
                argv=SANDBOXED_ARGV,
                memory_mb=512,
                cpus=1.0,
                pids_limit=128,
            )
            async with Client(sandbox_transport(spec)) as c:
                c.bench_tool = "echo"
                yield c
        elif side == "direct" and kind == "http":
            http = httpx2.AsyncClient(timeout=60, trust_env=False)
            async with http, Client(streamable_http_client(http_url, http_client=http)) as c:
                c.bench_tool = "echo"
                yield c
        elif side == "direct":
            params = StdioServerParameters(command=sys.executable, args=[str(SCENARIO)])
            async with Client(params) as c:
                c.bench_tool = "echo"
                yield c
        elif side == "reference":  # no token, the upstream's own tool names
            http = httpx2.AsyncClient(timeout=60, trust_env=False)
            async with http, Client(streamable_http_client(gateway_url, http_client=http)) as c:
                c.bench_tool = "echo"
                yield c
        else:
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"}, timeout=60, trust_env=False
            )
            async with http, Client(streamable_http_client(gateway_url, http_client=http)) as c:
                c.bench_tool = TOOLS[kind]
                yield c

    if side == "direct" and kind == "sandbox":
        return shared(open_client)
    return open_client


def shared(open_one: Any) -> Any:
    """Every session of a round calls through one client opened once for the round."""
    from contextlib import asynccontextmanager  # noqa: PLC0415

    holder: dict[str, Any] = {}

    @asynccontextmanager
    async def open_client() -> Any:
        yield holder["client"]

    @asynccontextmanager
    async def round_scope() -> Any:
        async with open_one() as client:
            holder["client"] = client
            try:
                yield
            finally:
                holder.clear()

    open_client.round_scope = round_scope  # type: ignore[attr-defined]
    return open_client


async def measure(open_client: Any, sessions: int, calls: int) -> list[float]:
    round_scope = getattr(open_client, "round_scope", None)
    if round_scope is not None:
        async with round_scope():
            return await _measure(open_client, sessions, calls)
    return await _measure(open_client, sessions, calls)


async def _measure(open_client: Any, sessions: int, calls: int) -> list[float]:
    start = anyio.Event()
    results: list[list[float]] = []

    async def one() -> None:
        results.append(await session_calls(open_client, calls, start))

    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(one)
        await anyio.sleep(min(10.0, 0.5 + sessions * 0.05))  # let every session open
        start.set()
    return [value for latencies in results for value in latencies]


def cold_calls(kind: str, open_client: Any, count: int) -> list[float]:
    """Stop the kind's runtime (a command to the runtime worker that holds it), wait until it
    is stopped, call it through the gateway (a start on demand); `count` times."""
    from registry.servers.jobs.runtime import runtime_request  # noqa: PLC0415
    from registry.servers.models import McpServer, RuntimeState, ServerStatus  # noqa: PLC0415

    server = McpServer.objects.get(slug=TOOLS[kind].partition("__")[0])
    found = []
    for _ in range(count):
        runtime_request(server=server, action="stop", actor="bench")
        deadline = time.monotonic() + 60
        while ServerStatus.objects.get(server=server).runtime_state != RuntimeState.STOPPED:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not stop within 60 s")
            time.sleep(0.1)
        time.sleep(1.0)  # the per-team session's process ends too
        found += anyio.run(measure, open_client, 1, 1)
    return found


def cpu_now(
    gateway: subprocess.Popen[Any],
    other: subprocess.Popen[Any] | None,
    runtime_worker: Any,
    reference: subprocess.Popen[Any] | None = None,
) -> dict[str, float]:
    """CPU seconds so far of the gateway (and the compared one), the runtime worker's own
    process, the reference proxy's own process (not the stdio server it holds) and this one."""
    return {
        "gateway": sum(cpu_of(tree_pids(gateway.pid)).values()),
        "compare": sum(cpu_of(tree_pids(other.pid)).values()) if other is not None else 0.0,
        "runtime": cpu_of([runtime_worker.pid])[runtime_worker.pid] if runtime_worker else 0.0,
        "reference": cpu_of([reference.pid])[reference.pid] if reference is not None else 0.0,
        "client": time.process_time(),
    }


def start_reference(kind: str, http_url: str, env: dict[str, str]) -> tuple[Any, str]:
    """The reference proxy (bench/gateway/reference_proxy.py) in front of the kind's server."""
    port = free_port()
    upstream = ["--http", http_url]
    if kind != "http":
        upstream = ["--stdio", sys.executable, str(SCENARIO)]
    process = subprocess.Popen(
        [sys.executable, str(REFERENCE_PROXY), "--port", str(port), *upstream], env=env, cwd=ROOT
    )
    wait_http(f"http://127.0.0.1:{port}/healthz")
    return process, f"http://127.0.0.1:{port}/mcp"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sessions", default="1,16,100")
    parser.add_argument("--kinds", default="http,stdio,sandbox")
    parser.add_argument("--cold", type=int, default=0, help="more cold calls (stdio, sandbox)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side, alternating")
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also measure the reference proxy (http and stdio): the SDK's floor",
    )
    parser.add_argument(
        "--compare-tree",
        type=Path,
        help="another checkout (with its own .venv): its gateway is measured too, as side "
        "'compare', in the same rounds (same servers, database and runtime worker)",
    )
    args = parser.parse_args()
    session_counts = [int(n) for n in args.sessions.split(",")]
    kinds = args.kinds.split(",")

    pid = os.getpid()
    load_at_start = loadavg()
    prefix = f"toolroom-bench-gateway-{pid}"
    database = f"toolroom_bench_gateway_{pid}"
    pg_create(database)
    env = toolroom_env(database_url=postgres_url(database), key_prefix=prefix)
    env["TOOLROOM_RUNTIME_ENDPOINT_HOST"] = "127.0.0.1"
    django_setup(env)
    migrate()
    full_env = {**os.environ, **env}
    processes: list[subprocess.Popen[Any]] = []
    rows = []
    try:
        http_port, gateway_port = free_port(), free_port()
        http_url = f"http://127.0.0.1:{http_port}/mcp"
        processes.append(
            subprocess.Popen(
                [sys.executable, str(SCENARIO), "--http", str(http_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_http(f"http://127.0.0.1:{http_port}/")
        sandbox_image = None
        if "sandbox" in kinds:
            from tests.sandbox_images import ensure_test_images  # noqa: PLC0415

            sandbox_image = ensure_test_images(say=lambda _line: None).servers.reference
        token = setup_world(http_url, [sys.executable, str(SCENARIO)], sandbox_image)
        gateway = start_gateway(ROOT, gateway_port, full_env)
        processes.append(gateway)
        gateway_base = f"http://127.0.0.1:{gateway_port}"
        wait_http(f"{gateway_base}/healthz")
        other: subprocess.Popen[Any] | None = None
        if args.compare_tree is not None:
            other_port = free_port()
            other = start_gateway(args.compare_tree.resolve(), other_port, full_env)
            processes.append(other)
            other_base = f"http://127.0.0.1:{other_port}"
            wait_http(f"{other_base}/healthz")
        runtime_worker = None
        if "stdio" in kinds or "sandbox" in kinds:
            runtime_worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "workers",
                    "worker",
                    "-Q",
                    "toolroom,runtime",
                    "-P",
                    "threads",
                    "-c",
                    "4",
                    "-n",
                    f"bench-{pid}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "-l",
                    "warning",
                ],
                env=full_env,
                cwd=ROOT,
                start_new_session=True,
            )
            processes.append(runtime_worker)
            time.sleep(5)  # the worker starts its runtime manager and endpoint
        gateway_urls = {"direct": "", "gateway": f"{gateway_base}/mcp"}
        if other is not None:
            gateway_urls["compare"] = f"{other_base}/mcp"
        for kind in kinds:
            reference: subprocess.Popen[Any] | None = None
            urls = dict(gateway_urls)
            if args.reference and kind in {"http", "stdio"}:
                reference, urls["reference"] = start_reference(kind, http_url, full_env)
                processes.append(reference)
            factories = {
                side: client_factory(
                    kind,
                    side,
                    http_url=http_url,
                    gateway_url=url,
                    token=token,
                    sandbox_image=sandbox_image,
                )
                for side, url in urls.items()
            }
            cold = anyio.run(measure, factories["gateway"], 1, 1)  # starts / opens upstream
            if other is not None:
                anyio.run(measure, factories["compare"], 1, 1)  # its own pooled session
            cold_row = len(rows)
            sides = list(urls)
            if kind != "http":
                factories["endpoint"] = link_factory(kind)
                sides.append("endpoint")
            for sessions in session_counts:
                calls = max(20, args.calls // max(1, sessions // 4))
                found: dict[str, list[float]] = {side: [] for side in sides}
                # CPU seconds by side: the gateway process, the runtime worker's own process
                # (not the servers it started), and this bench process (the calling client).
                spent = {
                    side: dict.fromkeys(
                        ("gateway", "compare", "runtime", "reference", "client"), 0.0
                    )
                    for side in sides
                }
                for round_number in range(args.rounds):
                    # Alternate: direct, gateway(, compare)(, endpoint), then the gateways in the
                    # other order, so neither always runs right after the direct round.
                    order = sides if round_number % 2 == 0 else [sides[0], *reversed(sides[1:])]
                    for side in order:
                        before = cpu_now(gateway, other, runtime_worker, reference)
                        found[side] += anyio.run(measure, factories[side], sessions, calls)
                        after = cpu_now(gateway, other, runtime_worker, reference)
                        for what in after:
                            spent[side][what] += after[what] - before[what]
                print(
                    f"{kind} {sessions} CPU ms/call by side:",
                    {
                        side: {
                            what: round(seconds / len(found[side]) * 1000, 2)
                            for what, seconds in spent[side].items()
                        }
                        for side in sides
                    },
                    flush=True,
                )
                d50, d95 = median(found["direct"]), p95(found["direct"])
                for side in [s for s in ("gateway", "compare", "reference") if s in sides]:
                    cpu = spent[side][side]
                    # The reference proxy holds its stdio server itself: no runtime worker.
                    runtime_path = kind != "http" and side != "reference"
                    runtime_cpu = spent[side]["runtime"]
                    g50, g95 = median(found[side]), p95(found[side])
                    rows.append(
                        [
                            {
                                "gateway": kind,
                                "compare": f"{kind} ({args.compare_tree})",
                                "reference": f"{kind} (reference proxy)",
                            }[side],
                            sessions,
                            len(found[side]),
                            f"{d50:.2f}",
                            f"{g50:.2f}",
                            f"{g50 - d50:+.2f}",
                            f"{d95:.2f}",
                            f"{g95:.2f}",
                            f"{g95 - d95:+.2f}",
                            f"{g50 / d50:.2f}x",
                            f"{cpu / len(found[side]) * 1000:.2f}",
                            f"{runtime_cpu / len(found[side]) * 1000:.2f}" if runtime_path else "",
                            f"{median(found['endpoint']):.2f}" if runtime_path else "",
                            f"{p95(found['endpoint']):.2f}" if runtime_path else "",
                            f"{cold[0]:.0f}"
                            if sessions == session_counts[0] and side == "gateway"
                            else "",
                        ]
                    )
                    print(rows[-1], flush=True)
            if kind != "http" and args.cold:
                cold += cold_calls(kind, factories["gateway"], args.cold)
                print(f"{kind} cold calls ms: {[round(value) for value in cold]}", flush=True)
                rows[cold_row][-1] = f"{median(cold):.0f}"
    finally:
        for process in reversed(processes):
            stop_process(process)
        redis_cleanup(prefix)
        pg_drop(database)
    print()
    print(f"load average at the start: {load_at_start}, at the end: {loadavg()}; Redis {REDIS_URL}")
    print(
        markdown_table(
            [
                "kind",
                "sessions",
                "calls",
                "direct p50 ms",
                "gateway p50 ms",
                "added p50",
                "direct p95 ms",
                "gateway p95 ms",
                "added p95",
                "gateway/direct p50",
                "gateway CPU ms/call",
                "runtime worker CPU ms/call",
                "endpoint p50 ms",
                "endpoint p95 ms",
                "cold call ms",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
