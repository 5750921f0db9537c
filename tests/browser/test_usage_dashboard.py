"""The admin's usage dashboard in Chromium: reached from the admin index, every period at 1280x800
(no column cut off) and 390 px (no sideways scroll), its charts drawn by the vendored uPlot from
our static files, a sparkline in every row, narrowed to a team and a server (a click on a name, the
selects, chips that remove the filter), its numbers table without script, and its links into the
Tool calls list.
The page fixture fails each test on a console error or a 4xx/5xx answer."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.sync_api import Browser, Page, Request, expect

from registry.gateway.models import ToolCall
from registry.gateway.usage import usage_rollup
from tests.browser.conftest import sign_in
from tests.factories import TeamFactory, UserFactory

UPLOT = "/static/gateway/vendor/uplot/uPlot.iife.min.js"

OVERFLOW = """() => ({
  page: document.documentElement.scrollWidth,
  cut: [...document.querySelectorAll('.usage-scroll')]
    .filter((box) => box.scrollWidth > box.clientWidth)
    .map((box) => (box.querySelector('table') || box).id),
})"""


# Each chart: the points uPlot drew, its box's width, its canvas's CSS width and how many of the
# canvas's pixels are painted (a blank canvas has none).
CHARTS = """() => [...document.querySelectorAll('.usage-chart')].map((box) => {
  const canvas = box.querySelector('canvas');
  let painted = 0;
  if (canvas) {
    const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) painted += 1;
  }
  return {
    id: box.id,
    points: Number(box.dataset.points || 0),
    box: box.clientWidth,
    canvas: canvas ? canvas.getBoundingClientRect().width : 0,
    painted,
  };
})"""


def _charts_drawn(page: Page, width: int) -> list[dict[str, Any]]:
    """Both charts drawn by uPlot at `width`, with every bin of the numbers table."""
    expect(page.locator(".usage-chart[data-drawn]")).to_have_count(2)
    assert page.evaluate("typeof uPlot") == "function"
    expect(page.locator("#usage-charts canvas")).to_have_count(2)
    expect(page.locator("#usage-numbers")).not_to_have_attribute("open", "")
    bins = page.locator("#usage-series-table tbody tr").count()
    charts: list[dict[str, Any]] = page.evaluate(CHARTS)
    assert [c["id"] for c in charts] == ["usage-chart-calls", "usage-chart-latency"]
    for chart in charts:
        assert chart["points"] == bins, chart
        assert chart["painted"] > 500, chart
        # The chart takes its box's width, and the box fits the window.
        assert abs(chart["canvas"] - chart["box"]) <= 1, chart
        assert chart["box"] <= width - 20, chart
    return charts


# Each table row's sparkline: its polyline's points and its text alternative.
SPARKS = """(table) => [...document.querySelectorAll(`#${table} tbody tr`)].map((row) => {
  const svg = row.querySelector('svg.usage-spark');
  const line = svg && svg.querySelector('polyline');
  const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
  return {
    label: svg ? svg.getAttribute('aria-label') : null,
    title: svg && svg.querySelector('title') ? svg.querySelector('title').textContent : null,
    points: line ? line.points.numberOfItems : 0,
    width: box.width,
    height: box.height,
  };
})"""


def _sparklines_drawn(page: Page, bins: int) -> None:
    """Every row of the team, server and tool tables has a sparkline of `bins` points, drawn
    (not collapsed) and described in words."""
    for table in ("usage-teams", "usage-servers", "usage-tools"):
        sparks = page.evaluate(SPARKS, table)
        assert sparks, table
        for spark in sparks:
            assert spark["points"] == bins, (table, spark)
            assert spark["width"] >= 90, (table, spark)
            assert spark["height"] >= 20, (table, spark)
            assert re.search(r"from \d+ to \d+", spark["label"] or ""), spark
            assert spark["title"] == spark["label"], spark


def _fits(page: Page, width: int, what: str) -> None:
    seen = page.evaluate(OVERFLOW)
    assert seen["page"] <= width, f"{what} is {seen['page']} px wide at {width} px"
    if width == 1280:
        assert seen["cut"] == [], f"{what} cuts off columns at 1280 px: {seen['cut']}"


def _calls() -> None:
    """A busy hour and day: two teams, three tools, some errors and quota refusals."""
    alpha = TeamFactory(slug="alpha", name="Alpha")
    beta = TeamFactory(slug="beta", name="Beta with a rather long team name for a phone")
    now = datetime.now(UTC)
    rows = []
    for i in range(240):
        outcome, error_class = "ok", ""
        if i % 9 == 0:
            outcome, error_class = "failed", "upstream_timeout"
        elif i % 13 == 0:
            outcome, error_class = "refused", "quota_exceeded"
        tool = ("read_file", "write_file", "a_tool_with_a_long_descriptive_name")[i % 3]
        rows.append(
            ToolCall(
                started_at=now - timedelta(minutes=i * 5 % 1400 + 1),
                duration_ms=float(3 + (i * 37) % 900),
                team_id=(alpha.pk, beta.pk, None)[i % 3],
                server_slug="files" if i % 2 else "mail-archive-search",
                tool_name=tool,
                name=f"files__{tool}",
                via="mcp",
                outcome=outcome,
                error_class=error_class,
            )
        )
    ToolCall.objects.bulk_create(rows)
    usage_rollup()


def test_the_usage_dashboard_fits_both_screens_and_links_into_the_calls(admin_page: Page):
    page = admin_page
    requested: list[str] = []

    def record(request: Request) -> None:
        requested.append(request.url)

    page.on("request", record)
    _calls()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/admin/")
    page.get_by_role("link", name="Usage dashboard").click()
    expect(page).to_have_url(re.compile(r"/admin/gateway/toolcall/usage/$"))
    expect(page.locator("#usage-totals")).to_contain_text("Calls")
    _charts_drawn(page, 1280)
    # The library came from our own static files, and nothing from anywhere else (no CDN).
    origin = re.match(r"https?://[^/]+", page.url)
    assert origin is not None
    assert f"{origin.group(0)}{UPLOT}" in requested
    assert [url for url in requested if not url.startswith(origin.group(0))] == []
    expect(page.locator("#usage-teams")).to_contain_text("Alpha")
    expect(page.locator("#usage-failing")).to_contain_text("upstream_timeout")
    expect(page.locator("#usage-quota")).to_contain_text("Alpha")

    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for period in ("Last hour", "Last 24 hours", "Last 30 days"):
            page.locator(".usage-periods").get_by_role("link", name=period).click()
            expect(page.locator(".usage-periods [aria-current]")).to_have_text(period)
            expect(page.locator("#usage-tools tbody tr").first).to_contain_text("/")
            bins = {"Last hour": 12, "Last 24 hours": 24, "Last 30 days": 30}[period]
            expect(page.locator("#usage-series-table tbody tr")).to_have_count(bins)
            _charts_drawn(page, width)
            _sparklines_drawn(page, bins)
            _fits(page, width, period)

    # Without a reload, the charts follow the window from 390 px to 1280 px.
    narrow = [c["box"] for c in page.evaluate(CHARTS)]
    page.set_viewport_size({"width": 1280, "height": 800})
    page.wait_for_function(
        "(before) => [...document.querySelectorAll('.usage-chart')].every((box, i) =>"
        " box.clientWidth > before[i] && Math.abs("
        "box.querySelector('canvas').getBoundingClientRect().width - box.clientWidth) <= 1)",
        arg=narrow,
    )

    # A team's name narrows the whole page to it: every table, the totals and the chart.
    page.locator(".usage-periods").get_by_role("link", name="Last 24 hours").click()
    expect(page.locator("#usage-chips")).to_have_count(0)
    all_calls = int(page.locator("#usage-totals strong").first.inner_text())
    page.locator("#usage-teams").get_by_role("link", name="Alpha", exact=True).click()
    expect(page).to_have_url(re.compile(r"/usage/\?period=day&team=\d+$"))
    expect(page.locator("#usage-chips .usage-chip")).to_have_text(["Team: Alpha\u00d7"])
    expect(page.locator("#usage-teams tbody tr")).to_have_count(1)
    expect(page.locator("#usage-filter-team option:checked")).to_have_text("Alpha")
    alpha_calls = int(page.locator("#usage-totals strong").first.inner_text())
    assert 0 < alpha_calls < all_calls
    charts = _charts_drawn(page, 1280)
    assert (
        sum(
            int(cell)
            for cell in page.locator(
                "#usage-series-table tbody tr td:nth-child(2)"
            ).all_text_contents()
        )
        == alpha_calls
    ), charts
    _sparklines_drawn(page, 24)
    _fits(page, 1280, "the page narrowed to Alpha")

    # A server chosen from its select narrows it further; the period keeps both.
    page.locator("#usage-filter-server").select_option("files")
    page.locator("#usage-filter").get_by_role("button", name="Filter").click()
    expect(page.locator("#usage-chips .usage-chip")).to_have_text(
        ["Team: Alpha\u00d7", "Server: files\u00d7"]
    )
    expect(page.locator("#usage-servers tbody tr")).to_have_count(1)
    expect(page.locator("#usage-tools tbody tr td:first-child")).to_contain_text(
        ["files / "] * page.locator("#usage-tools tbody tr").count()
    )
    both = int(page.locator("#usage-totals strong").first.inner_text())
    assert 0 < both < alpha_calls
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator(".usage-periods").get_by_role("link", name="Last 30 days").click()
    expect(page.locator("#usage-chips .usage-chip")).to_have_count(2)
    _charts_drawn(page, 390)
    _sparklines_drawn(page, 30)
    _fits(page, 390, "the 30 days narrowed to Alpha and files")

    # Removing the team's chip keeps the server's.
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_role("link", name="Remove the filter Team: Alpha").click()
    expect(page.locator("#usage-chips .usage-chip")).to_have_text(["Server: files\u00d7"])
    expect(page.locator("#usage-filter-team option:checked")).to_have_text("All teams")
    assert page.locator("#usage-teams tbody tr").count() == 3
    _fits(page, 1280, "the page narrowed to files")

    # A team's number of calls opens the Tool calls list filtered to it (and to the server).
    page.locator("#usage-teams tbody tr", has_text="Alpha").locator("td.num a").click()
    expect(page).to_have_url(re.compile(r"/admin/gateway/toolcall/\?.*team__id__exact="))
    expect(page).to_have_url(re.compile(r"server_slug=files"))
    expect(page.locator("#result_list tbody tr").first).to_contain_text("Alpha")


def test_without_script_the_dashboard_shows_its_numbers_table(
    chromium: Browser, live_server: Any, transactional_db: None
) -> None:
    _calls()
    UserFactory(username="alice", is_staff=True, is_superuser=True)
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 390, "height": 844}, java_script_enabled=False
    )
    try:
        page = context.new_page()
        failed: list[str] = []
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        sign_in(page, "alice")
        page.goto("/admin/gateway/toolcall/usage/?period=day")
        expect(page.locator("#usage-charts")).to_be_hidden()
        expect(page.locator("#usage-series-table")).to_be_visible()
        expect(page.locator("#usage-series-table tbody tr")).to_have_count(24)
        expect(page.locator("#usage-series-table tbody")).to_contain_text("UTC")
        assert page.locator("canvas").count() == 0
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert failed == []
    finally:
        context.close()
