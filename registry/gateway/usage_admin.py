"""The admin's usage dashboard (`/admin/gateway/toolcall/usage/`): calls, errors, quota hits and
p50/p95 latency per team, server and tool over the last hour, day or 30 days, with charts over
time (uPlot, from our static files) and links into the filtered Tool calls list. Data:
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


def usage_dashboard_view(
    model_admin: admin.ModelAdmin[ToolCall], request: HttpRequest
) -> HttpResponse:
    """The dashboard for `?period=hour|day|month` (day by default)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    period = request.GET.get("period", "day")
    if period not in PERIODS:
        period = "day"
    report = usage_report(period)
    calls_url = reverse("admin:gateway_toolcall_changelist")

    def rows(items: list[Row]) -> list[dict[str, Any]]:
        return [
            _line(item.stats, f"{calls_url}?{urlencode(item.filters)}", item.label)
            for item in items
        ]

    window = {"started_at__gte": report.since.astimezone(UTC).isoformat(timespec="seconds")}
    step = report.step.total_seconds()
    failing = [
        {
            "tool": f"{f.server_slug} / {f.tool_name}",
            "error_class": f.error_class or "-",
            "outcome": f.outcome,
            "calls": f.calls,
            "link": f"{calls_url}?"
            + urlencode(
                {
                    **window,
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
        "periods": [(key, label) for key, (label, _) in PERIODS.items()],
        "totals": _line(report.totals),
        "teams": rows(report.teams),
        "servers": rows(report.servers),
        "tools": rows(report.tools),
        "quota_teams": [row for row in rows(report.teams) if row["quota_hits"]],
        "failing": failing,
        "chart_series": chart_series(report.series, step),
        "series_rows": series_rows(report.series, step),
        "step_label": {300: "5 minutes", 3600: "hour", 86400: "day"}.get(int(step), "bin"),
        "first_bin": report.series[0].start if report.series else None,
        "calls_url": calls_url,
    }
    return TemplateResponse(request, "admin/gateway/usage.html", context)
