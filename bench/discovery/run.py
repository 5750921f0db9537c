"""Benchmark: registry discovery of a stdio server vs the raw SDK on the same server.

    python bench/discovery/run.py [--rounds 12] [--backends postgresql,sqlite] [--json FILE]

For each database backend a child process (a Toolroom process on a bench database of its own)
measures, interleaved in random order within every round, on two stdio servers (the published
mcp-server-time, and bench/discovery/small_server.py written with the SDK):

- registry: the path a worker takes - discovery_request (DiscoveryRun row, task sent to the real
  Redis broker after commit) -> discovery_claim -> discover_plan(server_launch_plan(...)) ->
  discovery_record (tool sync, scanner, vetting report, audit; database writes included);
- raw-tools: `async with mcp.Client(StdioServerParameters(...)) as c: await c.list_tools()`;
- raw-all: the same, sending the list requests the registry sends: tools/list, and where the
  server advertises them resources/list, resources/templates/list and prompts/list.

Every timing covers the whole session: spawn the process, negotiate, list, close (the process is
reaped). The first round is a warm-up (the first discovery also inserts the tools) and is not
counted. raw-all is the like-for-like comparison (same requests); raw-tools is the issue's
literal "connect + list". Target: registry median <= 1.2x the raw SDK.

Bounded: rounds x 2 servers x 3 variants sessions of about 1 s each. Self-cleaning: the child
processes drop their PostgreSQL database (toolroom_bench_discovery_<pid>) and delete their SQLite
file and Redis keys; every server process is closed by the session that started it.
"""

# Toolroom's modules are imported inside functions: only after django_setup() has configured
# the process for its bench database.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, MCPError, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import _common as common

HERE = Path(__file__).resolve().parent
SERVERS = {
    "mcp-server-time": [sys.executable, "-m", "mcp_server_time"],
    "small SDK server": [sys.executable, str(HERE / "small_server.py")],
}
VARIANTS = ("registry", "raw-tools", "raw-all")
TARGET = 1.2


# --- Child: one backend ------------------------------------------------------------------------


async def _raw_session(argv: list[str], *, everything: bool) -> dict[str, float]:
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    t0 = time.perf_counter()
    async with Client(params) as client:
        t1 = time.perf_counter()
        await client.list_tools()
        if everything:
            caps = client.server_capabilities
            if caps.resources is not None:
                await client.list_resources()
                # The registry tolerates servers without templates too.
                with contextlib.suppress(MCPError):
                    await client.list_resource_templates()
            if caps.prompts is not None:
                await client.list_prompts()
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {"connect": t1 - t0, "lists": t2 - t1, "close": t3 - t2}


def _registry_discovery(server: Any) -> dict[str, float]:
    """The worker's path, step by step (as workers.discovery.run_discovery runs it)."""
    from registry.servers.jobs.discovery import (
        discovery_claim,
        discovery_record,
        discovery_request,
    )
    from registry.servers.jobs.launch import server_launch_plan
    from workers.discovery import discover_plan

    t0 = time.perf_counter()
    run = discovery_request(server=server, actor="bench", trigger="bench")
    t1 = time.perf_counter()
    claimed = discovery_claim(run_id=run.pk)
    if claimed is None:
        raise RuntimeError(f"discovery run {run.pk} could not be claimed")
    plan = server_launch_plan(server=claimed.server)
    t2 = time.perf_counter()
    outcome = anyio.run(discover_plan, plan)
    t3 = time.perf_counter()
    discovery_record(run=claimed, outcome=outcome)
    t4 = time.perf_counter()
    if not outcome.ok:
        raise RuntimeError(f"discovery failed: {outcome.error}")
    timings = outcome.timings_ms
    lists = sum(timings.get(k, 0.0) for k in ("list_tools", "list_resources", "list_prompts"))
    return {
        "total": t4 - t0,
        "request": t1 - t0,
        "claim+plan": t2 - t1,
        "session": t3 - t2,
        "connect": timings["connect"] / 1000,
        "lists": lists / 1000,
        "close": (timings["total"] - timings["connect"] - lists) / 1000,
        "record": t4 - t3,
    }


def child(backend: str, rounds: int, out: Path, seed: int) -> None:
    key_prefix = f"toolroom-bench-discovery-{os.getpid()}"
    db_name = f"toolroom_bench_discovery_{os.getpid()}"
    sqlite_path = common.REPO / "var" / "bench" / f"discovery-{os.getpid()}.sqlite3"
    if backend == "postgresql":
        common.pg_create(db_name)
        database_url = common.postgres_url(db_name)
    else:
        sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        database_url = f"sqlite:///{sqlite_path}"
    try:
        common.django_setup(common.toolroom_env(database_url=database_url, key_prefix=key_prefix))
        common.migrate()
        _measure(backend, rounds, out, seed)
    finally:
        from django.db import connections

        connections.close_all()
        if backend == "postgresql":
            common.pg_drop(db_name)
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
        common.redis_cleanup(key_prefix)


def _cpu(after: resource.struct_rusage, before: resource.struct_rusage) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _measure(backend: str, rounds: int, out: Path, seed: int) -> None:
    from registry.servers import services
    from registry.servers.models import DiscoveryRun

    rows = {
        label: services.server_create(
            actor="bench",
            slug=f"bench-{index}",
            name=label,
            transport="stdio",
            command=argv,
            trust_tier="builtin",
        )
        for index, (label, argv) in enumerate(SERVERS.items())
    }
    rng = random.Random(seed)
    samples: dict[str, dict[str, list[float]]] = {
        label: {variant: [] for variant in VARIANTS} for label in SERVERS
    }
    # "<server>" for the registry's steps, "<server>|<variant>" for the raw SDK's.
    components: dict[str, dict[str, list[float]]] = {label: {} for label in SERVERS}
    for round_no in range(rounds + 1):
        jobs = [(label, variant) for label in SERVERS for variant in VARIANTS]
        rng.shuffle(jobs)
        for label, variant in jobs:
            key = label if variant == "registry" else f"{label}|{variant}"
            before_self = resource.getrusage(resource.RUSAGE_SELF)
            before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            if variant == "registry":
                parts = _registry_discovery(rows[label])
                elapsed = parts["total"]
            else:
                start = time.perf_counter()
                parts = anyio.run(
                    lambda argv=SERVERS[label], v=variant: _raw_session(
                        argv, everything=v == "raw-all"
                    )
                )
                elapsed = time.perf_counter() - start
            parts["cpu: this process"] = _cpu(resource.getrusage(resource.RUSAGE_SELF), before_self)
            parts["cpu: server process"] = _cpu(
                resource.getrusage(resource.RUSAGE_CHILDREN), before_children
            )
            if round_no:  # round 0 is the warm-up
                samples[label][variant].append(elapsed)
                for name, value in parts.items():
                    components.setdefault(key, {}).setdefault(name, []).append(value)
        print(f"  [{backend}] round {round_no}/{rounds} done", file=sys.stderr, flush=True)
    summaries = {
        label: DiscoveryRun.objects.filter(server=rows[label], status="succeeded")
        .order_by("-pk")
        .values_list("summary", flat=True)
        .first()
        for label in SERVERS
    }
    out.write_text(
        json.dumps(
            {
                "backend": backend,
                "samples": samples,
                "components": components,
                "counts": {
                    label: (summary or {}).get("counts", {}) for label, summary in summaries.items()
                },
                "protocol": {
                    label: (summary or {}).get("protocol_version", "")
                    for label, summary in summaries.items()
                },
            }
        )
    )


# --- Parent: run the backends, print the tables ------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(results: list[dict[str, Any]]) -> tuple[str, bool]:
    lines: list[str] = []
    met_all = True
    for result in results:
        backend = result["backend"]
        lines.append(f"\n**{backend}** (medians and p95 in ms over the measured rounds)\n")
        rows = []
        for label, variants in result["samples"].items():
            reg = variants["registry"]
            counts = result["counts"].get(label, {})
            for variant in VARIANTS:
                values = variants[variant]
                ratio_med = common.median(reg) / common.median(values)
                ratio_p95 = common.p95(reg) / common.p95(values)
                # Same round, minutes apart at most: shares the machine's load of the moment.
                paired = common.median([r / v for r, v in zip(reg, values, strict=True)])
                rows.append(
                    [
                        label,
                        variant,
                        len(values),
                        _ms(common.median(values)),
                        _ms(common.p95(values)),
                        "-" if variant == "registry" else f"{ratio_med:.3f}",
                        "-" if variant == "registry" else f"{ratio_p95:.3f}",
                        "-" if variant == "registry" else f"{paired:.3f}",
                    ]
                )
            like = common.median(reg) / common.median(variants["raw-all"])
            literal = common.median(reg) / common.median(variants["raw-tools"])
            met = like <= TARGET
            met_all = met_all and met
            rows.append(
                [
                    label,
                    f"**target {TARGET}x**",
                    "",
                    "",
                    "",
                    f"like-for-like {like:.3f}x: {'met' if met else 'MISSED'}",
                    f"vs list_tools only {literal:.3f}x",
                    "",
                ]
            )
            lines.append(
                f"- {label}: protocol {result['protocol'].get(label, '?')}, "
                f"{counts.get('tools', '?')} tools, {counts.get('resources', '?')} resources, "
                f"{counts.get('prompts', '?')} prompts"
            )
        lines.append("")
        lines.append(
            common.markdown_table(
                [
                    "server",
                    "variant",
                    "n",
                    "median ms",
                    "p95 ms",
                    "registry / this (median)",
                    "registry / this (p95)",
                    "registry / this (paired by round, median)",
                ],
                rows,
            )
        )
        comp_rows = []
        for key, parts in result["components"].items():
            label, _, variant = key.partition("|")
            comp_rows.append(
                [
                    label,
                    variant or "registry",
                    *(
                        _ms(common.median(parts[name])) if name in parts else ""
                        for name in COMPONENTS
                    ),
                ]
            )
        comp_rows.sort(key=lambda row: (row[0], VARIANTS.index(row[1])))
        lines.append(f"\nWhere the time goes ({backend}, medians in ms):\n")
        lines.append(common.markdown_table(["server", "variant", *COMPONENTS], comp_rows))
    return "\n".join(lines), met_all


COMPONENTS = (
    "request",
    "claim+plan",
    "session",
    "connect",
    "lists",
    "close",
    "record",
    "cpu: this process",
    "cpu: server process",
)


def parent(args: argparse.Namespace) -> int:
    facts = common.machine_facts()
    common.print_facts(facts)
    results = []
    for backend in args.backends.split(","):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
            out = Path(handle.name)
        try:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    backend,
                    "--rounds",
                    str(args.rounds),
                    "--seed",
                    str(args.seed),
                    "--out",
                    str(out),
                ],
                check=True,
                cwd=common.REPO,
                timeout=60 + args.rounds * 60,
            )
            results.append(json.loads(out.read_text()))
        finally:
            out.unlink(missing_ok=True)
    text, met = report(results)
    print(text)
    print(f"\nloadavg at end: {common.loadavg()}")
    print(f"Target (registry <= {TARGET}x raw SDK, like-for-like): {'MET' if met else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "results": results}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="measured rounds (plus a warm-up)")
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", help="also write the raw samples to this file")
    parser.add_argument("--child", choices=["postgresql", "sqlite"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.rounds <= 100:
        parser.error("--rounds must be between 1 and 100")
    if args.child:
        child(args.child, args.rounds, Path(args.out), args.seed)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
