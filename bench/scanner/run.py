"""The tool scanner's speed: ordinary tools, a huge schema and texts built to make it backtrack.

    .venv/bin/python bench/scanner/run.py [--repeats 3]

For each input it times `tool_findings_by_name` (the scanner as tool sync runs it) and, side by
side in the same run, `json.dumps` of the same definitions, which every sync pays anyway (the
definition hash serialises them): the ratio says how many serialisations one scan costs. CPU time
(`time.process_time`), median of the repeats. The inputs are the tests' (tests/scanner_inputs.py):
10,000 tools varied from the recorded published servers (tests/data/scanner), a 2 MB input
schema, and seven pathological descriptions of 0.3-2 million characters. Nothing is written; no
database is used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.scanner_inputs import (  # noqa: E402
    PATHOLOGICAL_TEXTS,
    ordinary_tools,
    tool,
    two_megabyte_schema,
)


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
    os.environ.setdefault("TOOLROOM_PROFILE", "test")
    import django  # noqa: PLC0415

    django.setup()


def inputs() -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        ("10,000 ordinary tools", ordinary_tools(10_000)),
        ("one tool, 2 MB input schema", [tool(inputSchema=two_megabyte_schema())]),
        *((f"description: {name}", [tool(text)]) for name, text in PATHOLOGICAL_TEXTS.items()),
    ]


def _cpu_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    _setup()
    from registry.servers.vetting.scanner import tool_findings_by_name  # noqa: PLC0415

    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| input | scan ms (CPU) | json.dumps ms (CPU) | scan / dumps |")
    print("|---|---|---|---|")
    for name, tools in inputs():
        scan = _cpu_seconds(lambda tools=tools: tool_findings_by_name(tools), args.repeats)
        dumps = _cpu_seconds(
            lambda tools=tools: [json.dumps(tool, sort_keys=True) for tool in tools], args.repeats
        )
        ratio = scan / dumps if dumps else float("inf")
        print(f"| {name} | {scan * 1000:.1f} | {dumps * 1000:.1f} | {ratio:.1f}x |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
