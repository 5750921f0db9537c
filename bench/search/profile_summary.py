"""Where a profiled worker's samples went: py-spy raw stacks summed per function, inclusive.

    .venv/bin/python bench/search/profile_summary.py var/prof/sqlite1/sqlite-uncached-*.txt
        [--top 40] [--requests 12314]

Reads the files `bench/search/run.py --profile DIR` writes (one per uvicorn worker, `--threads`
stacks), adds them up, and prints per thread kind (the event loop, the build threads, others)
and per function (counted once per stack, so a function's number holds everything it called)
the samples and their share; with `--requests` (wrk's count for the same run), the milliseconds
per request at the sampling rate. With the run's `<name>-threads.json` beside the files, first
the CPU seconds each kind of thread really used (from /proc), per request too.

Which samples mean CPU: with `BENCH_SEARCH_PYSPY=gil` only the thread holding the GIL is
sampled, which is Python's CPU (a C library running without the GIL, like SQLite's query, is
left out). py-spy's default mode with `--nonblocking` also counts threads waiting for the GIL
or on a lock as running: in one run it gave 36 s of "CPU" where /proc gave 14 s.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

RATE = 500  # samples per second, as run.py asks py-spy
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def thread_kind(name: str) -> str:
    """What a thread of a worker is, by its name (py-spy's `thread (id): name` frame)."""
    if name.startswith("catalogue-build"):
        return "build thread"
    if name == "MainThread":  # uvicorn runs the event loop there
        return "event loop"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--requests", type=int, default=0)
    args = parser.parse_args()
    by_kind: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for path in args.files:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            thread = re.match(r"thread \(\d+\): (.*)", frames[0])
            thread_name = thread[1] if thread else "?"
            frames = [frame for frame in frames if not frame.startswith(("thread (", "process "))]
            if any("resource_tracker" in frame for frame in frames):
                continue
            total += count
            by_kind[thread_kind(thread_name)] += count
            names = []
            for frame in frames:
                match = _FRAME.match(frame)
                names.append(f"{match['function']} ({match['file']})" if match else frame.strip())
            for name in set(names):
                inclusive[name] += count
            if names:
                leaves[names[-1]] += count

    _print_thread_cpu(args.files, args.requests)

    def cost(samples: int) -> str:
        share = f"{100 * samples / total:5.1f}%"
        if args.requests:
            return f"{share} {1000 * samples / RATE / args.requests:6.3f} ms/req"
        return share

    print(f"{total} samples on the CPU ({total / RATE:.1f} s at {RATE} Hz)")
    for kind, samples in by_kind.most_common():
        print(f"{samples:7d} {cost(samples)}  {kind}")
    print("\nInclusive, per function:")
    for name, samples in inclusive.most_common(args.top):
        print(f"{samples:7d} {cost(samples)}  {name}")
    print("\nSelf (leaf), per function:")
    for name, samples in leaves.most_common(args.top // 2):
        print(f"{samples:7d} {cost(samples)}  {name}")


def _print_thread_cpu(files: list[Path], requests: int) -> None:
    """The /proc CPU seconds of the run's threads, by kind (named as py-spy names them)."""
    names: dict[str, str] = {}
    for path in files:
        for line in path.read_text().splitlines():
            match = re.match(r"thread \((\d+)\): ([^;]*)", line)
            if match:
                names[match[1]] = match[2]
    run_names = {re.sub(r"-\d+\.txt$", "-threads.json", path.name) for path in files}
    by_kind: Counter[str] = Counter()
    for run_name in sorted(run_names):
        cpu_file = files[0].parent / run_name
        if not cpu_file.exists():
            continue
        for tid, seconds in json.loads(cpu_file.read_text()).items():
            name = names.get(tid, "?")
            by_kind[thread_kind(name)] += seconds
    if not by_kind:
        return
    total = sum(by_kind.values())
    per = f", {1000 * total / requests:.3f} ms/req" if requests else ""
    print(f"CPU from /proc: {total:.2f} s{per}")
    for kind, seconds in by_kind.most_common():
        per = f" {1000 * seconds / requests:6.3f} ms/req" if requests else ""
        print(f"{seconds:7.2f} s{per}  {kind}")
    print()


if __name__ == "__main__":
    main()
