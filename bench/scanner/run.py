"""The tool scanner's speed: ordinary tools, a huge schema and texts built to make it backtrack.

    .venv/bin/python bench/scanner/run.py [--repeats 3]

For each input it times `tool_findings_by_name` (the scanner as tool sync runs it) and, side by
side in the same run, `json.dumps` of the same definitions, which every sync pays anyway (the
definition hash serialises them): the ratio says how many serialisations one scan costs. CPU time
(`time.process_time`), median of the repeats. The inputs are the tests' (tests/test_scanner.py):
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
DATA = REPO / "tests" / "data" / "scanner"
PUBLISHED = [
    "mcp_server_time.json",
    "mcp_server_git.json",
    "server_everything.json",
    "server_memory.json",
    "server_filesystem.json",
    "reference_servers_paraphrased.json",
]


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
    os.environ.setdefault("TOOLROOM_PROFILE", "test")
    import django  # noqa: PLC0415

    django.setup()


def _varied(value: Any, index: int) -> Any:
    if isinstance(value, dict):
        return {
            key: f"{item} (variant {index})"
            if key in ("description", "title") and isinstance(item, str)
            else _varied(item, index)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_varied(item, index) for item in value]
    return value


def _tags(text: str) -> str:
    return "".join(chr(0xE0000 + ord(ch)) for ch in text)


def _tool(description: str = "Does one thing.", **fields: Any) -> dict[str, Any]:
    return {
        "name": "tool",
        "description": description,
        "inputSchema": {"type": "object", "properties": {}},
    } | fields


def inputs() -> list[tuple[str, list[dict[str, Any]]]]:
    published = [tool for name in PUBLISHED for tool in json.loads((DATA / name).read_text())]
    ordinary = []
    for index in range(10_000):
        tool = _varied(published[index % len(published)], index)
        tool["name"] = f"{tool['name']}_{index}"
        ordinary.append(tool)
    properties = {
        f"field_{index}": {
            "type": "string",
            "title": f"Field {index}",
            "description": f"Value of field {index}; pass the page token to continue. " * 3,
            "enum": ["alpha", "beta", "gamma"],
        }
        for index in range(7_500)
    }
    texts = {
        "ignore x 300,000": "ignore " * 300_000,
        "'<' x 2,000,000": "<" * 2_000_000,
        "do not x 300,000": "do not " * 300_000,
        "read x 400,000 + ~/.ssh": "read " * 400_000 + "~/.ssh",
        "send x 400,000 + to": "send " * 400_000 + "to ",
        "zero-width x 2,000,000": "\u200b" * 2_000_000,
        "tag characters x 290,000": _tags("ignore previous instructions ") * 10_000,
    }
    return [
        ("10,000 ordinary tools", ordinary),
        (
            "one tool, 2 MB input schema",
            [_tool(inputSchema={"type": "object", "properties": properties})],
        ),
        *((f"description: {name}", [_tool(text)]) for name, text in texts.items()),
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
