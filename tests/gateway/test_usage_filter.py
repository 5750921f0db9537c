"""The usage dashboard narrowed to one team and/or one server, and each row's sparkline: known call
records rolled up, then the numbers, the per-row series and the number of queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from registry.gateway.models import ToolCall
from registry.gateway.usage import usage_report, usage_rollup
from registry.gateway.usage_admin import sparkline
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 40, tzinfo=UTC)
DAY_BINS = 24  # 2026-11-19 13:00 ... 2026-11-20 12:00 UTC


def _at(moment: datetime, count: int, team: Any, server: str, tool: str, *, outcome: str = "ok"):
    ToolCall.objects.bulk_create(
        ToolCall(
            started_at=moment,
            duration_ms=20.0,
            team_id=team.pk if team else None,
            server_slug=server,
            tool_name=tool,
            name=f"{server}__{tool}",
            via="mcp",
            outcome=outcome,
            error_class="" if outcome == "ok" else "timeout",
        )
        for _ in range(count)
    )


def _known() -> tuple[Any, Any]:
    """Alpha: 10 calls (files/read 9 in hours 20, 22, 23 of the day; mail/send 1 failed in hour
    21); Beta: 4 (files/read, hour 20); no team: 3 (files/list, hour 18)."""
    alpha = TeamFactory(slug="alpha", name="Alpha")
    beta = TeamFactory(slug="beta", name="Beta")
    _at(NOW - timedelta(hours=3), 2, alpha, "files", "read")
    _at(NOW - timedelta(hours=1), 5, alpha, "files", "read")
    _at(NOW - timedelta(minutes=10), 2, alpha, "files", "read")
    _at(NOW - timedelta(hours=2), 1, alpha, "mail", "send", outcome="failed")
    _at(NOW - timedelta(hours=3), 4, beta, "files", "read")
    _at(NOW - timedelta(hours=5), 3, None, "files", "list")
    usage_rollup(now=NOW)
    return alpha, beta


def _spark(**at: int) -> list[int]:
    """A day's sparkline: `h20=2` is 2 calls in the day's 21st bin."""
    values = [0] * DAY_BINS
    for key, count in at.items():
        values[int(key[1:])] = count
    return values


def _table(rows: list[Any]) -> dict[str, tuple[int, list[int]]]:
    return {row.label: (row.stats.calls, row.spark) for row in rows}


def test_a_team_filter_narrows_every_table_the_chart_and_the_failing_tools():
    alpha, beta = _known()

    report = usage_report("day", now=NOW, team=alpha.pk)

    assert report.totals.calls == 10
    assert report.totals.errors == 1
    assert sum(p.stats.calls for p in report.series) == 10
    assert [p.stats.calls for p in report.series] == _spark(h20=2, h21=1, h22=5, h23=2)
    assert _table(report.teams) == {"Alpha": (10, _spark(h20=2, h21=1, h22=5, h23=2))}
    assert _table(report.servers) == {
        "files": (9, _spark(h20=2, h22=5, h23=2)),
        "mail": (1, _spark(h21=1)),
    }
    assert _table(report.tools) == {
        "files / read": (9, _spark(h20=2, h22=5, h23=2)),
        "mail / send": (1, _spark(h21=1)),
    }
    assert [(f.server_slug, f.calls) for f in report.failing] == [("mail", 1)]
    assert report.team_label == "Alpha"
    # The links into Tool calls keep the filter.
    assert all(row.filters["team__id__exact"] == str(alpha.pk) for row in report.servers)
    # The choices are the whole period's, whatever the filter.
    assert report.team_choices == [(alpha.pk, "Alpha"), (beta.pk, "Beta"), (0, "(no team)")]
    assert report.server_choices == ["files", "mail"]


def test_a_server_filter_and_both_filters_together():
    alpha, beta = _known()

    files = usage_report("day", now=NOW, server="files")
    assert files.totals.calls == 16
    assert _table(files.teams) == {
        "Alpha": (9, _spark(h20=2, h22=5, h23=2)),
        "Beta": (4, _spark(h20=4)),
        "(no team)": (3, _spark(h18=3)),
    }
    assert _table(files.servers) == {"files": (16, _spark(h18=3, h20=6, h22=5, h23=2))}
    assert _table(files.tools) == {
        "files / read": (13, _spark(h20=6, h22=5, h23=2)),
        "files / list": (3, _spark(h18=3)),
    }
    assert files.failing == []

    both = usage_report("day", now=NOW, team=beta.pk, server="files")
    assert both.totals.calls == 4
    assert _table(both.tools) == {"files / read": (4, _spark(h20=4))}

    nobody = usage_report("day", now=NOW, team=0)
    assert nobody.totals.calls == 3
    assert _table(nobody.teams) == {"(no team)": (3, _spark(h18=3))}
    assert nobody.teams[0].filters["team__isnull"] == "True"

    # The raw records, asked the same questions, agree row for row.
    for team, server in ((alpha.pk, None), (None, "files"), (beta.pk, "files"), (0, None)):
        rolled = usage_report("day", now=NOW, team=team, server=server)
        raw = usage_report("day", now=NOW, team=team, server=server, source="raw")
        for table in ("teams", "servers", "tools"):
            assert _table(getattr(raw, table)) == _table(getattr(rolled, table)), (team, table)


def test_sparklines_over_30_days_and_the_last_hour():
    alpha, _ = _known()

    month = usage_report("month", now=NOW, team=alpha.pk)
    assert len(month.series) == 30
    assert _table(month.servers) == {"files": (9, [0] * 29 + [9]), "mail": (1, [0] * 29 + [1])}

    # The last hour: twelve 5-minute bins from 11:41, from the raw records; 12:30 is the 10th.
    hour = usage_report("hour", now=NOW)
    assert _table(hour.teams) == {"Alpha": (2, [0] * 9 + [2, 0, 0])}
    assert _table(hour.tools) == {"files / read": (2, [0] * 9 + [2, 0, 0])}


def _many(teams: int, *, first: int = 0, now: datetime = NOW) -> None:
    """`teams` teams, each calling 3 servers x 2 tools at 4 times in the last 80 minutes."""
    for number in range(first, first + teams):
        team = TeamFactory(slug=f"team-{number}", name=f"Team {number}")
        for server in range(3):
            for tool in range(2):
                for step in range(4):
                    _at(now - timedelta(minutes=5 + 20 * step), 1, team, f"s{server}", f"t{tool}")
    usage_rollup(now=now)


@pytest.mark.parametrize("period", ["day", "month"])
def test_the_query_count_stays_the_same_with_many_rows_and_never_reads_the_call_records(
    period, django_assert_max_num_queries
):
    _many(25)
    team = TeamFactory._meta.model.objects.get(slug="team-3").pk
    for filters in ({}, {"team": team}, {"server": "s1"}, {"team": team, "server": "s1"}):
        with CaptureQueriesContext(connection) as queries:
            report = usage_report(period, now=NOW, **filters)
        statements = [q["sql"] for q in queries.captured_queries]
        assert not [sql for sql in statements if "gateway_toolcall" in sql], statements
        # choices, teams, team names, servers, tools, series (with every sparkline), failing
        # tools, the rollup's state
        assert len(statements) == 8, (filters, statements)
        assert all(len(row.spark) == len(report.series) for row in report.teams + report.tools)
    assert len(report.tools) == 2
    with django_assert_max_num_queries(8):
        usage_report(period, now=NOW)


def test_the_page_costs_the_same_queries_for_few_rows_and_many(client, alice):
    client.force_login(alice)
    url = reverse("admin:gateway_toolcall_usage")
    _many(1, now=datetime.now(UTC))
    client.get(url)  # the session and the user's permissions, once
    with CaptureQueriesContext(connection) as few:
        client.get(url, {"period": "day", "server": "s1"})
    _many(30, first=1, now=datetime.now(UTC))
    with CaptureQueriesContext(connection) as many:
        page = client.get(url, {"period": "day", "server": "s1"})
    assert len(page.context["teams"]) == 20
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_page_shows_the_filter_as_chips_selects_and_links(client, alice):
    alpha, _ = _known()
    now = datetime.now(UTC)
    _at(now - timedelta(minutes=5), 3, alpha, "files", "read")
    usage_rollup()
    client.force_login(alice)
    url = reverse("admin:gateway_toolcall_usage")

    page = client.get(url, {"period": "hour", "team": str(alpha.pk), "server": "files"})
    html = page.content.decode()
    assert page.context["totals"]["calls"] == 3
    chips = re.findall(r'<a class="usage-chip" href="([^"]*)"[^>]*>([^<]*)<', html)
    assert chips == [
        ("?period=hour&amp;server=files", "Team: Alpha"),
        (f"?period=hour&amp;team={alpha.pk}", "Server: files"),
    ]
    assert f'<option value="{alpha.pk}" selected>Alpha</option>' in html
    assert '<option value="files" selected>files</option>' in html
    # The periods keep the filter; a server's name narrows the page to it.
    assert f'href="?period=day&amp;team={alpha.pk}&amp;server=files"' in html
    (server,) = page.context["servers"]
    assert server["narrow"] == f"?period=hour&team={alpha.pk}&server=files"
    assert "team__id__exact" in server["link"]
    assert "server_slug=files" in server["link"]
    listed = client.get(server["link"])
    assert listed.status_code == 200
    # Each row has its sparkline with its numbers in words.
    sparks = re.findall(r'<svg class="usage-spark"[^>]*aria-label="([^"]*)"', html)
    assert len(sparks) == 3  # team, server, tool
    assert sparks[0].startswith("Calls per 5 minutes, last hour: 12 bins, from 0 to 3, ")

    # A malformed team narrows nothing; an unknown server narrows to nothing.
    assert client.get(url, {"team": "x"}).context["chips"] == []
    assert client.get(url, {"server": "nope"}).context["totals"]["calls"] == 0


def test_a_sparkline_is_a_polyline_scaled_to_its_box_with_a_text_alternative():
    line = sparkline([0, 5, 10, 5], "hour", "Last 24 hours")
    assert line["points"] == "0.0,23.0 32.0,12.0 64.0,1.0 96.0,12.0"
    assert line["label"] == "Calls per hour, last 24 hours: 4 bins, from 0 to 10, 5 in the last"
    flat = sparkline([0, 0, 0], "day", "Last 30 days")
    assert flat["points"] == "0.0,23.0 48.0,23.0 96.0,23.0"
