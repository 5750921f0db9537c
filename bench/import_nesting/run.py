"""Issues 11 and 26: what bounding YAML nesting saves on hostile files and costs on honest ones.

    .venv/bin/python bench/import_nesting/run.py [--unguarded-kb 20] [--repeats 5]

For deeply nested YAML of 20 KB and 100 KB, in two shapes (plain `[[[[...]]]]`, and the same behind
a double-quoted scalar broken over two lines, which fooled issue 11's character counter: issue 26),
it times Toolroom's YAML reading (`parse_yaml`, whose scanner stops at the bound) and, for the
`--unguarded-kb` size only (0 skips it: it takes many seconds), PyYAML's own event parse of the
same text, which is where an import spent its time without the bound. For an honest 1 MB file
(many servers) it times `parse_yaml` against the same two passes without the bound (the event
pass that refuses anchors on PyYAML's SafeLoader, then the load with the duplicate-key check):
the bound's cost on every real import.
Times are this process's CPU time (medians), the honest pair run in turns. Nothing is written;
no database is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
    os.environ.setdefault("TOOLROOM_PROFILE", "test")
    os.environ.setdefault("TOOLROOM_DATA_DIR", tempfile.mkdtemp(prefix="toolroom-bench-yaml-"))
    import django  # noqa: PLC0415

    django.setup()


def _seconds(action, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """The median CPU time of `action` (this process's: the machine is shared, wall time is not
    what the parse costs)."""
    times = []
    for _ in range(repeats):
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return statistics.median(times)


def _side_by_side(first, second, repeats: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median CPU times of two actions run in turns, so both see the same machine."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for action, into in ((first, times[0]), (second, times[1])):
            started = time.process_time()
            action()
            into.append(time.process_time() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def _honest_file(size: int) -> str:
    entry = (
        "  server-{n}:\n    name: Server {n}\n    transport: stdio\n"
        '    command: ["python", "-m", "server_{n}"]\n    env: {{REGION: eu, MODE: "ro"}}\n'
        "    sandbox: {{isolation: sandbox, network: none}}\n"
    )
    parts, n, total = ["version: 1\nmcp_servers:\n"], 0, 0
    while total < size:
        text = entry.format(n=n)
        parts.append(text)
        total += len(text)
        n += 1
    return "".join(parts)


def _hostile(shape: str, kb: int) -> str:
    half = kb * 1024 // 2
    nested = "[" * half + "]" * half
    if shape == "quoted newline":
        return f'x: ["abc\n " , {nested}]\n'
    return f"mcp_servers: {nested}\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unguarded-kb", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    _setup()
    import yaml  # noqa: PLC0415

    from registry.servers.importing.entries import ImportFileError  # noqa: PLC0415
    from registry.servers.importing.reading import (  # noqa: PLC0415
        _StrictSafeLoader,
        parse_yaml,
        yaml_nesting_depth,
    )

    def refuse(text: str) -> None:
        try:
            parse_yaml(text)
        except ImportFileError as exc:
            if "levels" not in exc.problems[0].message:
                raise AssertionError(exc.problems[0].message) from exc
            return
        raise AssertionError("a deeply nested file was accepted")

    def unguarded(text: str) -> None:
        try:
            for _event in yaml.parse(text, Loader=yaml.SafeLoader):
                pass
        except (yaml.YAMLError, RecursionError):
            pass

    class UnboundedStrictLoader(_StrictSafeLoader):
        """Toolroom's loader without the bound: PyYAML's own scanner step, the duplicate-key
        check kept."""

        fetch_flow_collection_start = yaml.scanner.Scanner.fetch_flow_collection_start
        add_indent = yaml.scanner.Scanner.add_indent

    def plain_passes(text: str) -> None:
        for _event in yaml.parse(text, Loader=yaml.SafeLoader):
            pass
        yaml.load(text, Loader=UnboundedStrictLoader)  # noqa: S506 - a SafeLoader subclass

    print("| input | Toolroom (parse_yaml) | PyYAML event parse alone | ratio |")
    print("|---|---|---|---|")
    for shape in ("nested", "quoted newline"):
        for kb in (20, 100):
            text = _hostile(shape, kb)
            guarded = _seconds(lambda t=text: refuse(t), args.repeats)
            name = f"{shape} {kb} KB"
            if kb == args.unguarded_kb:
                raw = _seconds(lambda t=text: unguarded(t), 1)
                ratio = guarded / raw
                print(f"| {name} | {guarded * 1000:.3f} ms | {raw:.2f} s | {ratio:.6f}x |")
            else:
                print(f"| {name} | {guarded * 1000:.3f} ms | not run | |")
    honest = _honest_file(1024 * 1024)
    depth = yaml_nesting_depth(honest)
    bounded, plain = _side_by_side(
        lambda: parse_yaml(honest), lambda: plain_passes(honest), args.repeats
    )
    print(
        f"| honest {len(honest) // 1024} KB (depth {depth}): parse_yaml against the same passes "
        f"without the bound | {bounded * 1000:.0f} ms | {plain * 1000:.0f} ms | "
        f"{bounded / plain:.3f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
