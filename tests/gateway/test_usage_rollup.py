"""The hourly usage rollup against the raw call records, and the admin's usage dashboard."""

from __future__ import annotations

import json
import math
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from registry.gateway.models import (
    BUCKET_FIELDS,
    LATENCY_BUCKETS_MS,
    CallRollup,
    CallRollupState,
    ToolCall,
)
from registry.gateway.usage import percentile, usage_report, usage_rollup
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 40, tzinfo=UTC)
OUTCOMES = ["ok"] * 7 + ["tool_error", "failed", "refused"]


def _calls(count: int, *, start: datetime, hours: float, teams: list[int | None], seed: int = 1):
    """`count` calls spread over `hours` from `start`, with latencies over every bucket."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        outcome = rng.choice(OUTCOMES)
        error_class = {"tool_error": "tool_error", "failed": "timeout"}.get(outcome, "")
        if outcome == "refused":
            error_class = rng.choice(["quota_exceeded", "not_allowed"])
        tool = rng.choice(["read", "write", "list"])
        rows.append(
            ToolCall(
                started_at=start + timedelta(seconds=rng.uniform(0, hours * 3600)),
                duration_ms=rng.lognormvariate(4, 1.5),
                team_id=rng.choice(teams),
                server_slug=rng.choice(["files", "mail"]),
                tool_name=tool,
                name=f"x__{tool}",
                via="mcp",
                outcome=outcome,
                error_class=error_class,
            )
        )
    ToolCall.objects.bulk_create(rows)


def _bucket(value: float) -> int:
    for index, bound in enumerate(LATENCY_BUCKETS_MS):
        if value <= bound:
            return index
    return len(LATENCY_BUCKETS_MS)


def _exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _rollup_rows() -> list[tuple[Any, ...]]:
    return list(
        CallRollup.objects.order_by(
            "hour", "team_id", "server_slug", "tool_name", "outcome", "error_class"
        ).values_list(
            "hour", "team_id", "server_slug", "tool_name", "outcome", "calls", *BUCKET_FIELDS
        )
    )


def test_the_rollup_counts_calls_errors_and_percentiles_as_the_raw_records_do():
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    _calls(600, start=NOW - timedelta(hours=20), hours=20.3, teams=[alpha.pk, beta.pk, None])

    usage_rollup(now=NOW)
    report = usage_report("day", now=NOW)

    assert sum(CallRollup.objects.values_list("calls", flat=True)) == 600
    since = report.since
    raw = ToolCall.objects.filter(started_at__gte=since)
    for row in report.teams:
        team_id = int(row.filters.get("team__id__exact", 0)) or None
        mine = raw.filter(team_id=team_id)
        durations = list(mine.values_list("duration_ms", flat=True))
        assert row.stats.calls == len(durations)
        assert row.stats.errors == mine.exclude(outcome="ok").count()
        assert row.stats.quota_hits == mine.filter(error_class="quota_exceeded").count()
        for q, value in ((0.5, row.stats.p50), (0.95, row.stats.p95)):
            assert value is not None
            assert _bucket(value) == _bucket(_exact(durations, q)), (row.label, q)
    assert {row.label for row in report.teams} == {"Alpha", "Beta", "(no team)"}
    assert report.totals.calls == raw.count()
    for row in report.tools:
        of_tool = raw.filter(
            server_slug=row.filters["server_slug"], tool_name=row.filters["tool_name"]
        )
        assert row.stats.calls == of_tool.count()
    # The same report computed from the raw rows agrees number for number.
    from_raw = usage_report("day", now=NOW, source="raw")
    assert [(r.label, r.stats) for r in from_raw.tools] == [
        (r.label, r.stats) for r in report.tools
    ]
    assert [p.stats for p in from_raw.series] == [p.stats for p in report.series]
    failing = {(f.server_slug, f.tool_name, f.error_class): f.calls for f in report.failing[:3]}
    for (server, tool, error_class), calls in failing.items():
        assert (
            calls
            == raw.filter(server_slug=server, tool_name=tool, error_class=error_class)
            .exclude(outcome="ok")
            .count()
        )


def test_percentiles_are_read_from_the_buckets_to_the_bucket():
    buckets = [0] * len(BUCKET_FIELDS)
    buckets[0], buckets[4] = 50, 50  # 50 calls <= 5 ms, 50 in (50, 100] ms
    assert percentile(buckets, 0.5) == 5.0
    assert 50 < (percentile(buckets, 0.95) or 0) <= 100
    assert percentile([0] * len(BUCKET_FIELDS), 0.5) is None
    slow = [0] * len(BUCKET_FIELDS)
    slow[-1] = 3
    assert percentile(slow, 0.95) == LATENCY_BUCKETS_MS[-1]


def test_a_second_run_changes_nothing_and_late_records_are_picked_up():
    _calls(300, start=NOW - timedelta(hours=5), hours=5, teams=[None])
    usage_rollup(now=NOW)
    first = _rollup_rows()

    usage_rollup(now=NOW)
    assert _rollup_rows() == first

    # A record of the previous hour written late (a batch, a journal replay) is counted.
    _calls(1, start=NOW - timedelta(minutes=70), hours=0, teams=[None], seed=7)
    usage_rollup(now=NOW + timedelta(minutes=5))
    assert sum(CallRollup.objects.values_list("calls", flat=True)) == 301


def test_a_run_after_downtime_catches_up_every_missed_hour():
    _calls(100, start=NOW - timedelta(hours=3), hours=3, teams=[None], seed=2)
    usage_rollup(now=NOW)
    # The workers were down for two days; calls went on.
    _calls(500, start=NOW + timedelta(minutes=30), hours=47, teams=[None], seed=3)
    later = NOW + timedelta(hours=48)

    done = usage_rollup(now=later)

    assert done["hours"] >= 48
    state = CallRollupState.objects.get(pk=1)
    assert state.done_until == later.replace(minute=0, second=0, microsecond=0)
    assert sum(CallRollup.objects.values_list("calls", flat=True)) == 600
    hours = set(CallRollup.objects.values_list("hour", flat=True))
    raw_hours = {
        moment.replace(minute=0, second=0, microsecond=0)
        for moment in ToolCall.objects.values_list("started_at", flat=True)
    }
    assert hours == raw_hours
    month = usage_report("month", now=later)
    assert month.totals.calls == 600
    assert sum(p.stats.calls for p in month.series) == 600


@pytest.mark.parametrize("period", ["day", "month"])
def test_the_dashboard_reads_only_the_rollup_in_a_pinned_number_of_queries(period):
    alpha = TeamFactory(slug="alpha")
    _calls(200, start=NOW - timedelta(hours=10), hours=10, teams=[alpha.pk, None])
    usage_rollup(now=NOW)

    with CaptureQueriesContext(connection) as queries:
        usage_report(period, now=NOW)

    statements = [q["sql"] for q in queries.captured_queries]
    assert not [sql for sql in statements if "gateway_toolcall" in sql], statements
    # the filter's choices, teams, team names, servers, tools, the series (with every row's
    # sparkline), failing tools, the rollup's state
    assert len(statements) == 8, statements


def test_the_dashboard_page_shows_every_period_and_its_links_open_the_call_list(client, alice):
    team = TeamFactory(slug="alpha")
    now = datetime.now(UTC)
    _calls(120, start=now - timedelta(minutes=50), hours=0.8, teams=[team.pk, None])
    usage_rollup()
    client.force_login(alice)
    url = reverse("admin:gateway_toolcall_usage")

    for period in ("hour", "day", "month"):
        page = client.get(url, {"period": period})
        assert page.status_code == 200
        assert b"Alpha" in page.content
        context = page.context
        assert context["totals"]["calls"] == 120
        # The charts' data goes to the page as JSON (json_script), drawn by the vendored uPlot.
        assert b"/static/gateway/vendor/uplot/uPlot.iife.min.js" in page.content
        handed = re.search(
            rb'<script id="usage-series" type="application/json">(.*?)</script>', page.content
        )
        assert handed is not None
        series = json.loads(handed.group(1))
        assert series == context["chart_series"]
        assert sum(series["calls"]) == 120
        bins = {"hour": 12, "day": 24, "month": 30}[period]
        assert len(series["t"]) == len(context["series_rows"]) == bins
        for row in [*context["teams"], *context["tools"], *context["failing"]]:
            listed = client.get(row["link"])
            assert listed.status_code == 200, row["link"]
    index = client.get(reverse("admin:index"))
    assert url.encode() in index.content


def test_the_dashboard_is_for_staff_only(client, django_user_model):
    member = django_user_model.objects.create_user("bob", password="x")
    client.force_login(member)
    answer = client.get(reverse("admin:gateway_toolcall_usage"))
    assert answer.status_code == 302
    assert "/admin/login/" in answer["Location"]


def test_the_rollup_is_scheduled_every_five_minutes():
    task = PeriodicTask.objects.get(name="Gateway usage rollup")
    assert task.task == "toolroom.gateway_usage_rollup"
    assert task.interval is not None
    assert task.interval.every == 300
