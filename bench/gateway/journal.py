"""What the call journal costs a gateway call: `CallRecorder.add` with the journal (one JSON line
appended to a file, workers/gateway/call_journal.py) against without it (memory only), in
alternating rounds of the same records, in one process.

    .venv/bin/python bench/gateway/journal.py [--records 20000] [--rounds 10]

No database is touched: `add` never writes it (the batch INSERT is the same with or without the
journal). The journal's folder is a temporary directory on the machine's disk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._common import django_setup, machine_facts, median, toolroom_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args()
    django_setup(toolroom_env(database_url="sqlite:///:memory:", key_prefix="bench-journal"))

    from registry.gateway.services import ToolCallRecord  # noqa: PLC0415 - after set-up
    from workers.gateway.recorder import CallRecorder  # noqa: PLC0415

    records = [
        ToolCallRecord(
            started_at=time.time(),
            duration_ms=2.5,
            name="git__git_status",
            via="mcp",
            outcome="ok",
            token_id=7,
            token_name="ci-bot",  # noqa: S106 (an agent token's name, not a secret)
            team_id=3,
            server_id=11,
            server_slug="git",
            tool_name="git_status",
            definition_hash="ab" * 32,
            conversation="cd" * 16,
            argument_bytes=42,
            argument_digest="ef" * 32,
        )
        for _ in range(options.records)
    ]
    timings: dict[str, list[float]] = {"memory only": [], "journal": []}
    with tempfile.TemporaryDirectory(prefix="toolroom-journal-bench-") as folder:
        for _ in range(options.rounds):
            for label, journal in (("memory only", ""), ("journal", folder)):
                recorder = CallRecorder(flush_seconds=3600, journal_dir=journal)
                started = time.perf_counter()
                for record in records:
                    recorder.add(record)
                timings[label].append((time.perf_counter() - started) / len(records) * 1e6)
                if recorder.journal is not None:
                    recorder.journal.seal()
                    recorder.journal.written()
                    recorder.journal.close(written=True)
    memory, journal = median(timings["memory only"]), median(timings["journal"])
    print(f"machine: {machine_facts()}")
    print(f"records per round: {options.records}, rounds: {options.rounds}")
    print(f"CallRecorder.add, memory only: {memory:.2f} us per call (median of rounds)")
    print(f"CallRecorder.add, with the journal: {journal:.2f} us per call (median of rounds)")
    extra = journal - memory
    print(f"journal - memory only: {extra:.2f} us per call; ratio {journal / memory:.1f}x")


if __name__ == "__main__":
    main()
