"""The search benchmark: quality on the labelled set and latency, on SQLite and PostgreSQL.

For each database it makes a fresh database of its own (a SQLite file under var/bench, or a
PostgreSQL database `toolroom_bench_search_<pid>`), migrates it, loads the labelled set
(tests/data/search: the demo servers and 1,000 generated tools, 1,045 tools on 56 servers, all
approved and granted to one team) and then, in a child process per database:

- quality: the top 20 of `catalogue_search` for every task; recall@5 and MRR per split (`tune`,
  the only tasks looked at while tuning, and `held_out_2`, never tuned on), and how many tasks'
  top 5 are identical (in order) on both databases;
- latency: uvicorn (2 workers, Redis cache, the ASGI fast path on) loaded by wrk with 16
  connections, 16 agents each sending the next task's `GET /api/v1/catalogue?q=...&format=mcp`
  as soon as it has its answer: uncached (TOOLROOM_CATALOGUE_CACHE_SECONDS=0: every answer is
  matched, ranked and rendered), cached (the rendered answer kept in the process or read from
  Redis) and cached with every answer read from Redis (bench/search/redis_only_asgi.py), side
  by side in one run; p50, p95 and p99; and one uncached search profiled in one thread.

    .venv/bin/python bench/search/run.py [--backends sqlite,postgresql] [--seconds 10]
        [--splits tune] [--no-latency] [--write-top5] [--modes uncached,cached] [--profile DIR]

While tuning the ranking, run it with `--splits tune --no-latency`: the held-out tasks' scores
and misses are then never printed (docs/search.md, "How the labelled set is used").

Needs PostgreSQL on 127.0.0.1:5432 (user postgres) and Redis on 127.0.0.1:6379. The target of
issue 17 is recall@5 >= 0.9 and p95 <= 20 ms at 16 concurrent agents; this prints what it got.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._common import (
    REPO,
    bench_database,
    child_json,
    loadavg,
    machine_facts,
    markdown_table,
    print_facts,
    started,
)

AGENTS = 16
WORKERS = 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Other benchmarks on a shared machine serve on fixed ports: this one asks for a free one.
PORT = int(os.environ.get("BENCH_SEARCH_PORT", "0")) or _free_port()


def child(backend: str) -> dict[str, Any]:
    """Runs in a process of its own (Django is set up once per process)."""
    from bench._common import django_setup, migrate  # noqa: PLC0415

    django_setup({})
    migrate()
    from registry.catalogue.search import catalogue_search  # noqa: PLC0415
    from registry.teams import services  # noqa: PLC0415
    from tests.search_corpus import load_corpus, tasks  # noqa: PLC0415

    started = time.perf_counter()
    servers = load_corpus()
    team = services.team_create(actor="bench", slug="bench")
    for server in servers:
        services.grant_create(actor="bench", team=team, server=server)
    role = team.roles.get(name="operations")
    token = services.agent_token_create(actor="bench", team=team, role=role, name="bench").plain
    load_seconds = time.perf_counter() - started

    labelled = tasks()
    rankings = {
        task.id: [
            tool.name
            for tool in catalogue_search(
                team_id=team.pk, role_id=role.pk, query=task.query, limit=20
            ).tools
        ]
        for task in labelled
    }

    from django.db import connection  # noqa: PLC0415

    profile = profile_searches(team.pk, role.pk, [task.query for task in labelled])
    return {
        "profile": profile,
        "backend": connection.vendor,
        "load_seconds": load_seconds,
        "rankings": rankings,
        "token": token,
    }


def profile_searches(team_id: int, role_id: int, queries: list[str]) -> dict[str, float]:
    """Where an uncached search's time goes, one thread, no HTTP: the query's terms with the
    thesaurus's and the database's match of them, the shared ranking, rendering (MCP format,
    JSON); and, beside them, the match of the query's own terms alone (without the thesaurus);
    ms per search, mean over 3 rounds of every query, after the kept catalogue's build."""
    import json as json_module  # noqa: PLC0415

    from registry.catalogue.formats import render_tools  # noqa: PLC0415
    from registry.catalogue.search import (  # noqa: PLC0415
        SearchRequest,
        _catalogue_at,
        search_document,
    )
    from registry.catalogue.versions import catalogue_state  # noqa: PLC0415
    from registry.search.selectors import tool_search_match  # noqa: PLC0415
    from registry.search.text import query_terms, weighted_query_terms  # noqa: PLC0415
    from registry.search.thesaurus import thesaurus  # noqa: PLC0415

    version = catalogue_state(team_id=team_id).version
    started = time.perf_counter()
    thesaurus()  # read once per process (about 0.2 s), timed with the catalogue's build
    kept = _catalogue_at(team_id=team_id, role_id=role_id, category=None, version=version)
    build_ms = (time.perf_counter() - started) * 1000
    parts = {"match": 0.0, "rank": 0.0, "render": 0.0, "whole": 0.0, "unexpanded": 0.0}
    rounds = 3
    for _ in range(rounds):
        for query in queries:
            # The match of the query's terms alone, as before the thesaurus, for comparison.
            t = time.perf_counter()
            tool_search_match(terms=query_terms(query))
            parts["unexpanded"] += time.perf_counter() - t
            t0 = time.perf_counter()
            weighted = kept.model.expanded(weighted_query_terms(query))
            matched = tool_search_match(terms=[term for term, _ in weighted])
            t1 = time.perf_counter()
            ranked = kept.model.rank(terms=weighted, matched=matched, limit=10)
            t2 = time.perf_counter()
            from dataclasses import replace  # noqa: PLC0415

            found = replace(kept.catalogue, tools=[kept.by_id[i] for i in ranked])
            json_module.dumps(render_tools("mcp", found, version=version, preflight=None))
            t3 = time.perf_counter()
            search_document(
                fmt="mcp",
                team_id=team_id,
                role_id=role_id,
                category=None,
                search=SearchRequest(text=query),
                version=version,
            )
            t4 = time.perf_counter()
            parts["match"] += t1 - t0
            parts["rank"] += t2 - t1
            parts["render"] += t3 - t2
            parts["whole"] += t4 - t3
    count = rounds * len(queries)
    result = {name: total * 1000 / count for name, total in parts.items()}
    result["catalogue_build_ms"] = build_ms
    result["searches"] = count
    return result


MODES = ("uncached", "cached", "cached, from Redis")


def http_latency(
    env: dict[str, str],
    token: str,
    *,
    seconds: int,
    modes: tuple[str, ...] = MODES,
    profile_dir: Path | None = None,
    backend: str = "",
) -> dict[str, Any]:
    """Uncached and cached searches against uvicorn (WORKERS processes) loaded by wrk with AGENTS
    connections, each request the next task's query; a warm-up run first in each mode (each
    worker builds the catalogue it searches once per catalogue version). With `profile_dir`,
    py-spy samples every worker during each measured run (raw stacks, one file per worker)."""
    from tests.search_corpus import tasks  # noqa: PLC0415

    paths = REPO / "var" / "bench" / f"search-paths-{os.getpid()}.txt"
    paths.write_text(
        "".join(
            f"/api/v1/catalogue?{urlencode({'q': task.query, 'format': 'mcp'})}\n"
            for task in tasks()
        )
    )
    measured: dict[str, Any] = {}
    try:
        for kind, cache_seconds, app in (
            ("uncached", 0, "registry.asgi:application"),
            ("cached", 3600, "registry.asgi:application"),
            # The same cached answers, every one read from Redis (none kept in the process).
            ("cached, from Redis", 3600, "bench.search.redis_only_asgi:application"),
        ):
            if kind not in modes:
                continue
            server_env = {
                **env,
                "TOOLROOM_PROFILE": "quickstart",
                "TOOLROOM_CATALOGUE_FAST_PATH": "true",
                "TOOLROOM_CATALOGUE_CACHE_SECONDS": str(cache_seconds),
            }
            argv = [
                sys.executable,
                *("-m", "uvicorn", app),
                *("--host", "127.0.0.1", "--port", str(PORT), "--workers", str(WORKERS)),
                *("--no-access-log", "--log-level", "warning"),
                *("--http", "registry.core.http_protocol:NoDelayHTTPProtocol"),
            ]
            with started(argv, cwd=REPO, env=server_env) as server:
                _wait_up(token)
                # Warm-up: each worker builds the kept catalogue once (a second or more on a
                # busy machine, with 16 requests waiting for it); 3 s were not always enough.
                _wrk(token, paths, seconds=8)
                with _sampled(server, profile_dir, f"{backend}-{kind}", seconds=seconds):
                    result = _wrk(token, paths, seconds=seconds)
                result["loadavg"] = loadavg()
                measured[kind] = result
    finally:
        paths.unlink(missing_ok=True)
    return measured


@contextlib.contextmanager
def _sampled(
    server: subprocess.Popen[Any], profile_dir: Path | None, name: str, *, seconds: int
) -> Iterator[None]:
    """py-spy (raw stacks by thread, 500 Hz; BENCH_SEARCH_PYSPY=gil: only the thread holding
    the GIL) on each of the server's worker processes while the block runs, and each worker
    thread's CPU seconds from /proc over the same time (`<name>-threads.json`); nothing without
    `profile_dir`."""
    if profile_dir is None:
        yield
        return
    profile_dir.mkdir(parents=True, exist_ok=True)
    workers = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    mode = ["--gil"] if os.environ.get("BENCH_SEARCH_PYSPY") == "gil" else []
    before = _thread_cpu(workers)
    samplers = [
        subprocess.Popen(
            [
                str(Path(sys.executable).parent / "py-spy"),
                *("record", "-p", pid, "-r", "500", "-f", "raw", "--nonblocking", "--threads"),
                *mode,
                *("-d", str(seconds), "-o", str(profile_dir / f"{name}-{index}.txt")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for index, pid in enumerate(workers)
    ]
    try:
        yield
        after = _thread_cpu(workers)
        (profile_dir / f"{name}-threads.json").write_text(
            json.dumps(
                {tid: round(after[tid] - before.get(tid, 0.0), 3) for tid in after}, indent=1
            )
        )
    finally:
        for sampler in samplers:
            sampler.wait(timeout=seconds + 60)


def _thread_cpu(pids: list[str]) -> dict[str, float]:
    """CPU seconds (user + system) of every thread of these processes, by thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                fields = (task / "stat").read_text().rpartition(")")[2].split()
                seconds[task.name] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def _wait_up(token: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}/api/v1/catalogue?q=time")
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("uvicorn did not come up")


def _wrk(token: str, paths: Path, *, seconds: int) -> dict[str, Any]:
    output = subprocess.run(
        [
            *("wrk", "-t2", f"-c{AGENTS}", f"-d{seconds}s", "--timeout", "10s"),
            *("-s", str(Path(__file__).parent / "load.lua"), f"http://127.0.0.1:{PORT}"),
        ],
        env={**os.environ, "BENCH_TOKEN": token, "BENCH_PATHS": str(paths)},
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    match = re.search(r"^RESULT (\{.*\})$", output, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"wrk printed no result:\n{output}")
    result: dict[str, Any] = json.loads(match.group(1))
    if result["status_errors"] or result["socket_errors"]:
        raise RuntimeError(f"errors under load: {result}")
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def write_top5(results: dict[str, dict[str, Any]]) -> None:
    """The agreement test's reference (tests/search/test_search_labelled_set.py), written only when
    both databases gave every task the same top 5, in order."""
    from tests.search_corpus import DATA, tasks  # noqa: PLC0415

    rankings = {backend: result["rankings"] for backend, result in results.items()}
    if set(rankings) != {"sqlite", "postgresql"}:
        raise SystemExit("--write-top5 needs both databases")
    top5 = {task.id: rankings["sqlite"][task.id][:5] for task in tasks()}
    differing = [t for t in top5 if top5[t] != rankings["postgresql"][t][:5]]
    if differing:
        raise SystemExit(f"not written: the databases differ on {' '.join(differing)}")
    path = DATA / "top5.json"
    document = {"recorded_on": ["sqlite", "postgresql"], "top5": top5}
    path.write_text(json.dumps(document, indent=1) + "\n")
    print(f"Wrote {path.relative_to(REPO)}: both databases, same top 5 for all {len(top5)} tasks.")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=int, default=10, help="per latency run")
    parser.add_argument(
        "--splits",
        default="tune,held_out_2,held_out_3",
        help="which splits' quality to print; while tuning the ranking, only `tune`",
    )
    parser.add_argument("--no-latency", action="store_true", help="quality only")
    parser.add_argument(
        "--write-top5",
        action="store_true",
        help="write tests/data/search/top5.json (only when both databases gave every task the "
        "same top 5)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="which latency runs: uncached, cached, 'cached, from Redis' (comma-separated)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="a directory: py-spy samples each uvicorn worker during each measured run there",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        json.dump(child(args.child), sys.stdout)
        return
    splits = args.splits.split(",")
    modes = tuple(mode.strip() for mode in re.split(r",(?! )", args.modes))
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: one or more of {', '.join(MODES)}")
    if not args.no_latency and shutil.which("wrk") is None:
        parser.error("the latency runs need wrk (Debian: apt-get install wrk), or --no-latency")
    if args.profile is not None and not (Path(sys.executable).parent / "py-spy").exists():
        parser.error("--profile needs py-spy beside this Python (.venv/bin/pip install py-spy)")

    from tests.search_corpus import score, tasks  # noqa: PLC0415 (no Django needed)

    facts = machine_facts()
    results: dict[str, dict[str, Any]] = {}
    for backend in args.backends.split(","):
        with bench_database(backend, "search") as env:
            results[backend] = child_json(__file__, backend, env)
            if not args.no_latency:
                results[backend].update(
                    http_latency(
                        env,
                        results[backend]["token"],
                        seconds=args.seconds,
                        modes=modes,
                        profile_dir=args.profile,
                        backend=backend,
                    )
                )

    print_facts(facts)
    rows = []
    for backend, result in results.items():
        for split in splits:
            scores = score(result["rankings"], tasks(split))
            rows.append(
                [
                    backend,
                    split,
                    scores.tasks,
                    f"{scores.recall_at_5:.3f}",
                    f"{scores.mrr:.3f}",
                    " ".join(scores.misses) or "-",
                ]
            )
    print("\nQuality (1,045 tools; recall@5 target >= 0.9)\n")
    print(markdown_table(["database", "split", "tasks", "recall@5", "MRR", "misses"], rows))
    if len(results) == 2:
        first, second = (result["rankings"] for result in results.values())
        shown = [task for split in splits for task in tasks(split)]
        same = [task.id for task in shown if first[task.id][:5] == second[task.id][:5]]
        same_set = [
            task.id for task in shown if set(first[task.id][:5]) == set(second[task.id][:5])
        ]
        total = len(shown)
        print(
            f"\nTop 5 identical on both databases: {len(same)}/{total} tasks in order, "
            f"{len(same_set)}/{total} as sets."
        )
        if args.write_top5:
            write_top5(results)
    print_profile(results)
    if args.no_latency:
        return
    rows = []
    for backend, result in results.items():
        for kind in modes:
            run = result[kind]
            rows.append(
                [
                    backend,
                    kind,
                    run["requests"],
                    f"{run['rps']:.0f}",
                    f"{run['p50_us'] / 1000:.1f}",
                    f"{run['p95_us'] / 1000:.1f}",
                    f"{run['p99_us'] / 1000:.1f}",
                    run["loadavg"],
                ]
            )
    print(
        f"\nLatency: uvicorn, {WORKERS} workers, wrk -c{AGENTS} (16 agents), {args.seconds} s per "
        "run (p95 target <= 20 ms)\n"
    )
    headers = ["database", "answers", "requests", "req/s", "p50 ms", "p95 ms", "p99 ms", "load"]
    print(markdown_table(headers, rows))


def print_profile(results: dict[str, dict[str, Any]]) -> None:
    searches = next(iter(results.values()))["profile"]["searches"]
    print(
        f"\nOne uncached search, one thread, no HTTP (ms per search, mean of {searches:.0f}; "
        f"load {loadavg()})\n"
    )
    parts = ("match", "unexpanded", "rank", "render", "whole")
    rows = [
        [
            backend,
            *(f"{result['profile'][part]:.2f}" for part in parts),
            f"{result['profile']['catalogue_build_ms']:.0f}",
        ]
        for backend, result in results.items()
    ]
    headers = [
        "database",
        "terms + FTS match",
        "FTS match, own terms only",
        "ranking",
        "render",
        "search_document",
        "kept build ms",
    ]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
