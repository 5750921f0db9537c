"""The catalogue benchmark: requests/s and p50/p95 of uncached, cached and 304 answers.

For each registry size (10, 100, 1,000 servers x 20 tools; 100 teams each granted 10 servers)
it recreates a PostgreSQL database of its own, seeds it, and serves Toolroom with uvicorn (two
worker processes) on 127.0.0.1, Redis as the cache; `wrk` (Debian's package) loads it over
loopback for a bounded time:

- uncached: the server runs with TOOLROOM_CATALOGUE_CACHE_SECONDS=0, every answer is built;
- cached:   the rendered catalogue comes from Redis (warmed once per team);
- 304:      the agent sends the ETag it holds.

Then it prints the table and the ratios against the targets: 304 p95 <= 0.2x uncached p95,
cached throughput >= 5x uncached, uncached p95 at 1,000 servers <= 1.5x the p95 at 10.

    .venv/bin/python bench/catalogue/run.py [--sizes 10 100 1000] [--seconds 10] [--repeat 3]
                                            [--no-fast-path]

Needs: PostgreSQL on 127.0.0.1:5432 (user postgres), Redis on 127.0.0.1:6379, `wrk`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
HOST = "127.0.0.1"
PORT = 18431
DATABASE = "toolroom_catalogue_bench"
DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
REDIS_URL = "redis://127.0.0.1:6379/13"
CACHE_PREFIX = "bench-catalogue"
PATH = "/api/v1/catalogue"
RESULT = re.compile(r"^RESULT (\{.*\})$", re.MULTILINE)


FAST_PATH = {"on": "true"}


def environment(data_dir: str, cache_seconds: int) -> dict[str, str]:
    return {
        "TOOLROOM_CATALOGUE_FAST_PATH": FAST_PATH["on"],
        **os.environ,
        "TOOLROOM_PROFILE": "quickstart",
        "TOOLROOM_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "TOOLROOM_CACHE_PREFIX": CACHE_PREFIX,
        "TOOLROOM_CATALOGUE_CACHE_SECONDS": str(cache_seconds),
        # Under ASGI Django runs each request's sync code in a thread of its own, so a persistent
        # connection (CONN_MAX_AGE > 0) would be left open per request until PostgreSQL refuses
        # more clients: every request opens and closes its connection.
        "DATABASE_CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-c", sql],
        check=True,
        capture_output=True,
    )


def flush_cache() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{CACHE_PREFIX}:*", count=1000):
        client.delete(key)


def prepare(servers: int, data_dir: str) -> dict[str, str]:
    psql(f"DROP DATABASE IF EXISTS {DATABASE}")
    psql(f"CREATE DATABASE {DATABASE}")
    env = environment(data_dir, 0)
    subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    seeded = subprocess.run(
        [PYTHON, str(HERE / "seed.py"), "--servers", str(servers)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    psql("VACUUM ANALYZE")  # fresh statistics for the planner
    flush_cache()
    tokens: dict[str, str] = json.loads(seeded.stdout)
    return tokens


def fetch(token: str, etag: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://{HOST}:{PORT}{PATH}")
    request.add_header("Authorization", f"Bearer {token}")
    if etag:
        request.add_header("If-None-Match", etag)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback http)
            headers = {name.lower(): value for name, value in response.headers.items()}
            return response.status, headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {name.lower(): value for name, value in exc.headers.items()}, exc.read()


@contextmanager
def serving(data_dir: str, cache_seconds: int, probe_token: str) -> Any:
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "uvicorn",
            "registry.asgi:application",
            "--host",
            HOST,
            "--port",
            str(PORT),
            "--workers",
            "2",
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=environment(data_dir, cache_seconds),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if fetch(probe_token)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("uvicorn did not come up")
            time.sleep(0.3)
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def load(tokens_file: Path, *, etag: bool, seconds: int, connections: int) -> dict[str, Any]:
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(HERE / "load.lua"),
            f"http://{HOST}:{PORT}",
        ],
        env={
            **os.environ,
            "BENCH_TOKENS": str(tokens_file),
            "BENCH_ETAG": "1" if etag else "0",
            "BENCH_PATH": PATH,
        },
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    match = RESULT.search(output)
    if match is None:
        raise RuntimeError(f"wrk printed no result:\n{output}")
    result: dict[str, Any] = json.loads(match.group(1))
    if result["status_errors"] or result["socket_errors"]:
        raise RuntimeError(f"errors under load: {result}")
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput: other tenants of a shared machine disturb single runs."""
    ordered = sorted(runs, key=lambda run: run["rps"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["runs"] = len(runs)
    return chosen


def measure(
    servers: int, *, seconds: int, connections: int, repeat: int
) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="toolroom-bench-") as data_dir:
        tokens = prepare(servers, data_dir)
        probe = next(iter(tokens.values()))
        tokens_file = Path(data_dir) / "tokens.txt"
        results: dict[str, dict[str, Any]] = {}

        with serving(data_dir, 0, probe):
            status, headers, body = fetch(probe)
            assert status == 200
            assert headers["x-toolroom-cache"] == "miss"
            tools = len(json.loads(body)["tools"])
            tokens_file.write_text("".join(f"{token} -\n" for token in tokens.values()))
            results["uncached"] = median_run(
                [
                    load(tokens_file, etag=False, seconds=seconds, connections=connections)
                    for _ in range(repeat)
                ]
            )
        flush_cache()
        with serving(data_dir, 3600, probe):
            etags = {}
            for token in tokens.values():  # warm: one build per team
                status, headers, _ = fetch(token)
                assert status == 200
                etags[token] = headers["etag"]
            status, headers, _ = fetch(probe)
            assert headers["x-toolroom-cache"] == "hit"
            assert fetch(probe, etags[probe])[0] == 304
            tokens_file.write_text("".join(f"{t} {e}\n" for t, e in etags.items()))
            cached, not_modified = [], []
            for _ in range(repeat):  # interleaved, so both see the same disturbances
                cached.append(
                    load(tokens_file, etag=False, seconds=seconds, connections=connections)
                )
                not_modified.append(
                    load(tokens_file, etag=True, seconds=seconds, connections=connections)
                )
            results["cached"] = median_run(cached)
            results["304"] = median_run(not_modified)
        for result in results.values():
            result["tools"] = tools
        flush_cache()
        return results


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(all_results: dict[int, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| servers | tools/agent | answer   |  req/s | p50 ms | p95 ms |",
        "|--------:|------------:|----------|-------:|-------:|-------:|",
    ]
    for servers, results in all_results.items():
        for name in ("uncached", "cached", "304"):
            r = results[name]
            lines.append(
                f"| {servers:>7} | {r['tools']:>11} | {name:<8} | {r['rps']:>6.0f} "
                f"| {r['p50_us'] / 1000:>6.2f} | {r['p95_us'] / 1000:>6.2f} |"
            )
    lines.append("")
    lines.append("| servers | 304 p95 / uncached p95 (<= 0.2) | cached / uncached req/s (>= 5) |")
    lines.append("|--------:|--------------------------------:|-------------------------------:|")
    for servers, results in all_results.items():
        p95_ratio = results["304"]["p95_us"] / results["uncached"]["p95_us"]
        rps_ratio = results["cached"]["rps"] / results["uncached"]["rps"]
        lines.append(
            f"| {servers:>7} | {p95_ratio:>24.3f} {verdict(p95_ratio <= 0.2):>6} "
            f"| {rps_ratio:>23.1f} {verdict(rps_ratio >= 5):>6} |"
        )
    sizes = sorted(all_results)
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        growth = all_results[large]["uncached"]["p95_us"] / all_results[small]["uncached"]["p95_us"]
        lines.append("")
        lines.append(
            f"uncached p95 at {large} servers / at {small} servers: {growth:.2f} "
            f"(<= 1.5: {verdict(growth <= 1.5)})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--seconds", type=int, default=10, choices=range(2, 61))
    parser.add_argument("--connections", type=int, default=8, choices=range(1, 65))
    parser.add_argument("--repeat", type=int, default=3, choices=range(1, 6))
    parser.add_argument(
        "--no-fast-path",
        action="store_true",
        help="Let Django answer everything (TOOLROOM_CATALOGUE_FAST_PATH=false), for comparison.",
    )
    args = parser.parse_args()
    FAST_PATH["on"] = "false" if args.no_fast_path else "true"
    all_results = {}
    load_before = os.getloadavg()
    for servers in args.sizes:
        print(f"measuring {servers} servers ...", file=sys.stderr)
        all_results[servers] = measure(
            servers, seconds=args.seconds, connections=args.connections, repeat=args.repeat
        )
    print(report(all_results))
    print(
        f"\nfast path {'off' if args.no_fast_path else 'on'}; "
        f"wrk -t1 -c{args.connections}, {args.seconds} s per run, median of {args.repeat} runs; "
        f"{os.cpu_count()} cores; load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}"
    )
    psql(f"DROP DATABASE IF EXISTS {DATABASE}")


if __name__ == "__main__":
    main()
