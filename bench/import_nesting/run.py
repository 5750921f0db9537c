"""Issue 11: what bounding YAML nesting before parsing saves on hostile files, costs on honest ones.

    .venv/bin/python bench/import_nesting/run.py [--unguarded-kb 20] [--repeats 5]

For deeply nested flow YAML (`[[[[...]]]]`) of 20 KB and 100 KB it times Toolroom's YAML reading
(`parse_yaml`: the nesting bound, then PyYAML) and, for the `--unguarded-kb` size only (0 skips
it: it takes many seconds), PyYAML's own event parse of the same text, which is where the import
used to spend its time before refusing. For an honest 1 MB file (many servers) it times the bound
alone against PyYAML's event parse of the same text: the bound's cost on every real import.
Nothing is written; no database is used.
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
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unguarded-kb", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    _setup()
    import yaml  # noqa: PLC0415

    from registry.servers.importing.entries import ImportFileError  # noqa: PLC0415
    from registry.servers.importing.reading import parse_yaml, yaml_nesting_depth  # noqa: PLC0415

    def refuse(text: str) -> None:
        try:
            parse_yaml(text)
        except ImportFileError:
            return
        raise AssertionError("a deeply nested file was accepted")

    def unguarded(text: str) -> None:
        try:
            for _event in yaml.parse(text, Loader=yaml.SafeLoader):
                pass
        except yaml.YAMLError:
            pass

    print("| input | Toolroom (bound + parse) | PyYAML event parse alone | ratio |")
    print("|---|---|---|---|")
    for kb in (20, 100):
        half = kb * 1024 // 2
        text = "mcp_servers: " + "[" * half + "]" * half
        guarded = _seconds(lambda t=text: refuse(t), args.repeats)
        if kb == args.unguarded_kb:
            raw = _seconds(lambda t=text: unguarded(t), 1)
            print(
                f"| nested {kb} KB | {guarded * 1000:.3f} ms | {raw:.2f} s | {guarded / raw:.6f}x |"
            )
        else:
            print(f"| nested {kb} KB | {guarded * 1000:.3f} ms | not run | |")
    honest = _honest_file(1024 * 1024)
    depth, where = yaml_nesting_depth(honest)
    assert where == -1, "the honest file is refused"
    bound = _seconds(lambda: yaml_nesting_depth(honest), args.repeats)
    parse = _seconds(lambda: unguarded(honest), 1)
    print(
        f"| honest {len(honest) // 1024} KB (depth {depth}), the bound alone | "
        f"{bound * 1000:.0f} ms | {parse * 1000:.0f} ms | {bound / parse:.3f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
