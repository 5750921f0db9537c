"""The admin's usage dashboard (`/admin/gateway/toolcall/usage/`): calls, errors, quota hits and
p50/p95 latency per team, server and tool over the last hour, day or 30 days, narrowed to one team
and/or one server (`?team=`, `?server=`), with charts over time (uPlot, from our static files), a
sparkline per row (inline SVG drawn here) and links into the filtered Tool calls list. Data:
registry/gateway/usage.py."""

from __future__ import annotations

from datetime import UTC
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from registry.gateway.models import ToolCall
from registry.gateway.usage import PERIODS, Point, Row, Stats, usage_report


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _line(stats: Stats, link: str | None = None, label: str = "") -> dict[str, Any]:
    return {
        "label": label,
        "link": link,
        "calls": stats.calls,
        "errors": stats.errors,
        "error_rate": f"{stats.error_rate * 100:.1f}%",
        "quota_hits": stats.quota_hits,
        "p50": _ms(stats.p50),
        "p95": _ms(stats.p95),
    }


SPARK_WIDTH, SPARK_HEIGHT = 96, 24


def sparkline(values: list[int], step_label: str, title: str) -> dict[str, Any]:
    """A row's calls per bin as an SVG polyline's points (0,0 top left; 1 px of margin), with
    its text alternative: the period, the bin and the range of the numbers."""
    top = max(values, default=0)
    last = max(len(values) - 1, 1)
    span_y = SPARK_HEIGHT - 2
    points = " ".join(
        f"{i * SPARK_WIDTH / last:.1f},{1 + span_y - (v / top * span_y if top else 0):.1f}"
        for i, v in enumerate(values)
    )
    low = min(values, default=0)
    return {
        "points": points,
        "width": SPARK_WIDTH,
        "height": SPARK_HEIGHT,
        "label": f"Calls per {step_label}, {title.lower()}: {len(values)} bins, "
        f"from {low} to {top}, {values[-1] if values else 0} in the last",
    }


def _ms_value(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def chart_series(points: list[Point], step_seconds: float) -> dict[str, Any]:
    """The report's bins, column by column, for the charts (`json_script`): start of each bin
    (Unix seconds, UTC), calls, errors, p50 and p95 in ms (null for a bin without calls)."""
    return {
        "step": int(step_seconds),
        "t": [int(p.start.timestamp()) for p in points],
        "calls": [p.stats.calls for p in points],
        "errors": [p.stats.errors for p in points],
        "p50": [_ms_value(p.stats.p50) for p in points],
        "p95": [_ms_value(p.stats.p95) for p in points],
    }


def series_rows(points: list[Point], step_seconds: float) -> list[dict[str, Any]]:
    """The same bins as a table: what the page shows without script."""
    fmt = "%Y-%m-%d" if step_seconds >= 86400 else "%Y-%m-%d %H:%M"
    return [
        {**_line(p.stats), "when": p.start.astimezone(UTC).strftime(fmt) + " UTC"} for p in points
    ]


def _filter_of(request: HttpRequest) -> tuple[int | None, str | None]:
    """The team (its id, 0 for calls of no team) and the server (its slug) the page is narrowed
    to; a blank or malformed parameter narrows nothing."""
    raw_team = request.GET.get("team", "").strip()
    team = int(raw_team) if raw_team.isdigit() and len(raw_team) < 10 else None
    server = request.GET.get("server", "").strip()[:80] or None
    return team, server


def usage_dashboard_view(
    model_admin: admin.ModelAdmin[ToolCall], request: HttpRequest
) -> HttpResponse:
    """The dashboard for `?period=hour|day|month` (day by default)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    period = request.GET.get("period", "day")
    if period not in PERIODS:
        period = "day"
    team, server = _filter_of(request)
    report = usage_report(period, team=team, server=server)
    calls_url = reverse("admin:gateway_toolcall_changelist")
    step = report.step.total_seconds()
    step_label = {300: "5 minutes", 3600: "hour", 86400: "day"}.get(int(step), "bin")

    def here(**changes: Any) -> str:
        """This page's address with the filter changed (None removes a parameter)."""
        query = {"period": period, "team": team, "server": server, **changes}
        return "?" + urlencode({k: v for k, v in query.items() if v is not None})

    def rows(items: list[Row], narrow: str | None = None) -> list[dict[str, Any]]:
        return [
            {
                **_line(item.stats, f"{calls_url}?{urlencode(item.filters)}", item.label),
                "narrow": here(**{narrow: item.key}) if narrow else None,
                "spark": sparkline(item.spark, step_label, report.title),
            }
            for item in items
        ]

    chips = []
    if team is not None:
        chips.append({"name": "Team", "value": report.team_label, "remove": here(team=None)})
    if server is not None:
        chips.append({"name": "Server", "value": server, "remove": here(server=None)})
    teams = rows(report.teams, "team")

    failing = [
        {
            "tool": f"{f.server_slug} / {f.tool_name}",
            "error_class": f.error_class or "-",
            "outcome": f.outcome,
            "calls": f.calls,
            "link": f"{calls_url}?"
            + urlencode(
                {
                    **report.filters,
                    "server_slug": f.server_slug,
                    "tool_name": f.tool_name,
                    "outcome": f.outcome,
                    **({"error_class": f.error_class} if f.error_class else {}),
                }
            ),
        }
        for f in report.failing
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Usage: {report.title.lower()}",
        "opts": model_admin.opts,
        "report": report,
        "periods": [(key, label, here(period=key)) for key, (label, _) in PERIODS.items()],
        "chips": chips,
        "team_choices": report.team_choices,
        "server_choices": report.server_choices,
        "chosen_team": team,
        "chosen_server": server,
        "totals": _line(report.totals),
        "teams": teams,
        "servers": rows(report.servers, "server"),
        "tools": rows(report.tools),
        "quota_teams": [row for row in teams if row["quota_hits"]],
        "failing": failing,
        "chart_series": chart_series(report.series, step),
        "series_rows": series_rows(report.series, step),
        "step_label": step_label,
        "first_bin": report.series[0].start if report.series else None,
        "calls_url": calls_url,
    }
    return TemplateResponse(request, "admin/gateway/usage.html", context)
