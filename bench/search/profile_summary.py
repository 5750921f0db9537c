"""Where a profiled worker's samples went: py-spy raw stacks summed per function, inclusive.

    .venv/bin/python bench/search/profile_summary.py var/prof/sqlite1/sqlite-uncached-*.txt
        [--top 40] [--requests 12314]

Reads the files `bench/search/run.py --profile DIR` writes (one per uvicorn worker, `--threads`
stacks of threads on the CPU), adds them up, and prints per thread kind (the event loop, the
build threads, others) and per function (counted once per stack, so a function's number holds
everything it called) the samples and their share; with `--requests` (wrk's count for the same
run), the milliseconds of CPU per request at the sampling rate.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

RATE = 500  # samples per second, as run.py asks py-spy
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def thread_kind(frames: list[str]) -> str:
    joined = ";".join(frames)
    if "BuildThreads._serve" in joined:
        return "build thread"
    if "asyncio/base_events.py" in joined or "uvloop" in joined or "Server.serve" in joined:
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
            if (frames and frames[0].startswith("thread (")) or frames[0].startswith("process "):
                frames = [
                    frame for frame in frames if not frame.startswith(("thread (", "process "))
                ]
            if any("resource_tracker" in frame for frame in frames):
                continue
            total += count
            by_kind[thread_kind(frames)] += count
            names = []
            for frame in frames:
                match = _FRAME.match(frame)
                names.append(f"{match['function']} ({match['file']})" if match else frame.strip())
            for name in set(names):
                inclusive[name] += count
            if names:
                leaves[names[-1]] += count

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


if __name__ == "__main__":
    main()
