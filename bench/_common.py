"""Shared helpers of the benchmarks: bench databases, Django set-up, statistics, CPU from /proc.

Everything here stays on 127.0.0.1: the machine's PostgreSQL (trust auth, user postgres) and
Redis. Bench databases are named `toolroom_bench_*` and dropped by the scripts that create them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import redis

REPO = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
CLK_TCK = os.sysconf("SC_CLK_TCK")

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# --- Environment and Django --------------------------------------------------------------------


def postgres_url(name: str) -> str:
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{name}"


def toolroom_env(*, database_url: str, key_prefix: str, **extra: str) -> dict[str, str]:
    """The environment of every Toolroom process a benchmark starts (and of the bench itself)."""
    return {
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "test",
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "TOOLROOM_BROKER_KEY_PREFIX": f"{key_prefix}:",
        "TOOLROOM_CACHE_PREFIX": key_prefix,
        "TOOLROOM_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        "TOOLROOM_DATA_DIR": str(REPO / "var" / "bench"),
        "LOG_LEVEL": "WARNING",
        **extra,
    }


def django_setup(env: dict[str, str]) -> None:
    """Configure this process as a Toolroom process with `env`, then set Django up."""
    os.environ.update(env)
    import django  # noqa: PLC0415 - only once the environment is set

    django.setup()


def migrate() -> None:
    from django.core.management import call_command  # noqa: PLC0415 - after django_setup

    call_command("migrate", verbosity=0, interactive=False)


def pg_create(name: str) -> None:
    """(Re)create a bench database; refuses names that are not toolroom_bench_*."""
    if not name.startswith("toolroom_bench_"):
        raise ValueError(f"not a bench database name: {name}")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def pg_drop(name: str) -> None:
    if not name.startswith("toolroom_bench_"):
        raise ValueError(f"not a bench database name: {name}")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_cleanup(prefix: str) -> int:
    """Delete every Redis key a benchmark made under its own prefix."""
    client = redis.Redis.from_url(REDIS_URL)
    deleted = 0
    keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
    for start in range(0, len(keys), 1000):
        deleted += int(client.delete(*keys[start : start + 1000]))
    client.close()
    return deleted


@contextlib.contextmanager
def bench_database(backend: str, label: str) -> Iterator[dict[str, str]]:
    """A fresh database of the bench's own on `backend` (`sqlite`: a file under var/bench;
    `postgresql`: `toolroom_bench_<label>_<pid>`) and a Redis key prefix of its own: the process
    environment pointing Toolroom at them. The database and the keys are removed afterwards."""
    pid = os.getpid()
    prefix = f"toolroom-bench-{label}-{pid}-{backend}"
    path = REPO / "var" / "bench" / f"{label}-{pid}.sqlite3"
    name = f"toolroom_bench_{label}_{pid}"
    if backend == "postgresql":
        pg_create(name)
        url = postgres_url(name)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        url = f"sqlite:///{path}"
    try:
        yield {**os.environ, **toolroom_env(database_url=url, key_prefix=prefix)}
    finally:
        redis_cleanup(prefix)
        if backend == "postgresql":
            pg_drop(name)
        else:
            path.unlink(missing_ok=True)


def child_json(script: str, argument: str, env: dict[str, str]) -> dict[str, Any]:
    """What `script --child ARGUMENT` prints as JSON, run in a process of its own with `env`
    (Django is set up once per process, on the bench database `env` names)."""
    output = subprocess.run(
        [sys.executable, script, "--child", argument],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        timeout=1800,
    ).stdout
    result: dict[str, Any] = json.loads(output)
    return result


# --- Statistics --------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (with few samples: close to the maximum)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(0.95 * len(ordered)))
    return float(ordered[rank - 1])


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


# --- Processes and CPU -------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    return text[text.rindex(")") + 2 :].split()


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # After the name: state(0) ppid(1) ... utime(11) stime(12).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def tree_pids(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children_of(pid))
    return pids


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    return {pid: proc_cpu_seconds(pid) for pid in pids}


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle, since boot (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stop_process(process: subprocess.Popen[Any], *, timeout: float = 30.0) -> None:
    """SIGTERM, wait, then SIGKILL: for the processes a benchmark started itself."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def started(argv: Sequence[str], **kwargs: Any) -> Iterator[subprocess.Popen[Any]]:
    process = subprocess.Popen(list(argv), **kwargs)
    try:
        yield process
    finally:
        stop_process(process)


# --- Machine facts -----------------------------------------------------------------------------


def _version(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "not found"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": f"{os.cpu_count()} x {cpu}",
        "memory": _meminfo(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mcp": version("mcp"),
        "httpx2": version("httpx2"),
        "celery": version("celery"),
        "django": version("django"),
        "postgresql": _version(["psql", "--version"]),
        "redis": _version(["redis-server", "--version"]),
        "loadavg_at_start": loadavg(),
    }


def _meminfo() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        return f"{int(first.split()[1]) // (1024 * 1024)} GiB"
    return "unknown"


def print_facts(facts: dict[str, str]) -> None:
    print("Machine: " + "; ".join(f"{key} {value}" for key, value in facts.items()))
