"""The usage dashboard on 1,000,000 call records: what the hourly rollup costs to run, and what the
dashboard's queries cost read from the rollup against computed from the raw records, side by side
in one run (issue 28, "A dashboard of use").

    .venv/bin/python bench/usage/run.py [--rows 1000000] [--days 30] [--rounds 5]

It creates a PostgreSQL database of its own (`toolroom_bench_usage_<pid>`, dropped at the end),
migrates it, and writes the rows with one INSERT ... SELECT over generate_series: spread evenly over
`--days` days, 50 servers x 10 tools (popularity skewed: a server's and a tool's chance falls
with its number, as the square of a uniform draw), 10 teams (each server called by one team, 5% of
calls by no team), about 14% errors (2% quota refusals), log-uniform
latencies from 1 ms to 400 ms. Then it measures, in this order:

- the rollup's first run (a catch-up over every hour of the records) and a steady-state run (the
  look-back hours and the current one, what the beat task does every 5 minutes);
- `usage_report(period)` for the last 24 hours and the last 30 days, from the rollup and from the
  raw records (`source="raw"`, the same grouped queries over `gateway_toolcall`), alternating in
  each round; the median of `--rounds` rounds, the queries per report, and the ratio raw / rollup;
- the last hour (always read from the raw records, on the `started_at` index) for reference.

Needs: PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth; BENCH_PG_ADMIN_URL overrides).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._common import (
    bench_database,
    django_setup,
    machine_facts,
    markdown_table,
    median,
    migrate,
    print_facts,
)

SEED_SQL = """
INSERT INTO gateway_toolcall (
    started_at, duration_ms, token_id, token_name, person_name, client_name, role_name, team_id,
    server_slug, tool_name, name, definition_hash, via, conversation, outcome, error_class, error,
    argument_bytes, argument_digest, upstream_subject
)
SELECT
    %(end)s::timestamptz - (i::float8 * %(span)s / %(rows)s) * interval '1 second',
    exp(random() * ln(400.0)),
    NULL, 'bench-token', '', '', 'member',
    CASE WHEN r < 0.05 THEN NULL ELSE (%(teams)s::int[])[1 + s %% 10] END,
    's' || lpad(s::text, 2, '0'),
    't' || t,
    's' || lpad(s::text, 2, '0') || '__t' || t,
    '', 'mcp', '',
    CASE WHEN i %% 50 = 7 THEN 'refused' WHEN i %% 13 = 0 THEN 'tool_error'
         WHEN i %% 17 = 0 THEN 'failed' ELSE 'ok' END,
    CASE WHEN i %% 50 = 7 THEN 'quota_exceeded' WHEN i %% 13 = 0 THEN 'tool_error'
         WHEN i %% 17 = 0 THEN 'upstream_timeout' ELSE '' END,
    '', 64, '', ''
FROM (
    SELECT i, floor(50 * power(random(), 2))::int AS s, floor(10 * power(random(), 2))::int AS t,
           random() AS r
    FROM generate_series(%(first)s, %(last)s) AS i
) AS seed
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    print_facts(machine_facts())
    with bench_database("postgresql", "usage") as env:
        django_setup(env)
        migrate()
        run(options)


def run(options: argparse.Namespace) -> None:
    from django.db import connection  # noqa: PLC0415 - after set-up
    from django.test.utils import CaptureQueriesContext  # noqa: PLC0415
    from django.utils import timezone  # noqa: PLC0415

    from registry.gateway.models import CallRollup, CallRollupDay  # noqa: PLC0415
    from registry.gateway.usage import usage_report, usage_rollup  # noqa: PLC0415
    from registry.teams.services import team_create  # noqa: PLC0415

    teams = [team_create(actor="bench", slug=f"team-{n}", name=f"Team {n}").pk for n in range(10)]
    now = timezone.now()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # In slices, each well within the statement timeout of a loaded machine.
        for offset in range(1, options.rows + 1, 100_000):
            cursor.execute(
                SEED_SQL,
                {
                    "end": now,
                    "span": options.days * 86400,
                    "rows": options.rows,
                    "teams": teams,
                    "first": offset,
                    "last": min(offset + 99_999, options.rows),
                },
            )
        cursor.execute("VACUUM ANALYZE gateway_toolcall")
    print(
        f"seeded {options.rows:,} call records over {options.days} days in "
        f"{time.perf_counter() - started:.1f} s"
    )

    started = time.perf_counter()
    first = usage_rollup(now=now)
    first_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE gateway_callrollup")
    started = time.perf_counter()
    steady = usage_rollup(now=now)
    steady_s = time.perf_counter() - started
    rollup_rows = CallRollup.objects.count()
    day_rows = CallRollupDay.objects.count()
    print()
    print(
        markdown_table(
            ["rollup run", "hours", "rows written", "seconds"],
            [
                [
                    "first (catch-up over every hour)",
                    first["hours"],
                    first["rows"],
                    f"{first_s:.2f}",
                ],
                ["steady state (every 5 min)", steady["hours"], steady["rows"], f"{steady_s:.3f}"],
            ],
        )
    )
    print(
        f"hourly rows: {rollup_rows:,} ({rollup_rows / options.rows:.3f} per call record); "
        f"daily rows: {day_rows:,} ({day_rows / options.rows:.3f} per call record)"
    )

    timings: dict[tuple[str, str], list[float]] = {}
    queries: dict[tuple[str, str], int] = {}
    calls: dict[tuple[str, str], int] = {}
    cases = [
        ("day", "rollup"),
        ("day", "raw"),
        ("month", "rollup"),
        ("month", "raw"),
        ("hour", "raw"),
    ]
    for _ in range(options.rounds):
        for period, source in cases:
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                report = usage_report(period, source=source, now=now)  # type: ignore[arg-type]
                elapsed = time.perf_counter() - started
            timings.setdefault((period, source), []).append(elapsed * 1000)
            queries[(period, source)] = len(captured.captured_queries)
            calls[(period, source)] = report.totals.calls
    print()
    rows = []
    for period in ("day", "month"):
        rolled, raw = median(timings[(period, "rollup")]), median(timings[(period, "raw")])
        rows.append(
            [
                period,
                f"{calls[(period, 'rollup')]:,}",
                queries[(period, "rollup")],
                f"{rolled:.1f}",
                f"{raw:.1f}",
                f"{raw / rolled:.1f}x",
            ]
        )
        if calls[(period, "rollup")] != calls[(period, "raw")]:
            print(
                f"!! {period}: rollup counts {calls[(period, 'rollup')]} calls, raw "
                f"{calls[(period, 'raw')]}"
            )
    hour = median(timings[("hour", "raw")])
    rows.append(
        [
            "hour (raw, by design)",
            f"{calls[('hour', 'raw')]:,}",
            queries[("hour", "raw")],
            "-",
            f"{hour:.1f}",
            "-",
        ]
    )
    print(
        markdown_table(
            [
                "period",
                "calls in it",
                "queries",
                "rollup ms (median)",
                "raw ms (median)",
                "raw / rollup",
            ],
            rows,
        )
    )
    print(f"rounds: {options.rounds}, cases alternating in each round")


if __name__ == "__main__":
    main()
