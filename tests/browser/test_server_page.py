"""The server page reads well: why health is degraded, what "Keep warm" does, the capabilities."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections
from playwright.sync_api import Page, expect

from registry.servers.models import (
    Health,
    HealthSample,
    McpServer,
    ReviewStatus,
    ServerStatus,
)
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from tests.mcp_fixtures import scenario_argv


def _server_page(page: Page, server: McpServer) -> None:
    page.goto(f"/admin/servers/mcpserver/{server.pk}/change/")


def test_degraded_health_says_why(admin_page: Page):
    page = admin_page
    slow = McpServerFactory(name="Slow", review_status=ReviewStatus.APPROVED)
    slow_ms = settings.TOOLROOM_HEALTH_DEGRADED_LATENCY_MS + 1500
    ServerStatus.objects.filter(server=slow).update(health=Health.DEGRADED, latency_ms=slow_ms)
    failing = McpServerFactory(
        name="Failing", review_status=ReviewStatus.APPROVED, health_failure_threshold=3
    )
    ServerStatus.objects.filter(server=failing).update(
        health=Health.DEGRADED, consecutive_failures=2, last_error="Connection refused\nat ..."
    )
    for _ in range(2):
        HealthSample.objects.create(server=failing, ok=False, error="Connection refused")

    _server_page(page, slow)
    expect(page.locator("#server-health-reason")).to_have_text(
        f"slow: the last check took {slow_ms:.0f} ms, over the "
        f"{settings.TOOLROOM_HEALTH_DEGRADED_LATENCY_MS:.0f} ms threshold"
    )
    _server_page(page, failing)
    expect(page.locator("#server-health-reason")).to_have_text(
        "2 failed checks in a row (unhealthy from 3); last error: Connection refused"
    )
    expect(page.locator("#server-health-history thead")).to_contain_text("Latency")

    page.goto("/admin/servers/mcpserver/fleet/")
    expect(page.locator("#content-main")).to_contain_text("2 failed checks in a row")


def test_keep_warm_says_it_turns_auto_start_on(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Clock", review_status=ReviewStatus.APPROVED)
    assert not server.auto_start
    _server_page(page, server)

    page.get_by_role("button", name="Keep warm").click()

    expect(page.locator(".messagelist")).to_contain_text("Keep warm: asked the workers")
    expect(page.locator(".messagelist")).to_contain_text("Auto-start is on now")
    server.refresh_from_db()
    assert server.auto_start


def test_the_vetting_report_lists_capabilities_in_words(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Scenario", command=scenario_argv())
    with ThreadPoolExecutor(max_workers=1) as pool:  # discovery runs its own event loop

        def discover():
            try:
                return discover_inline(server)
            finally:
                connections.close_all()

        pool.submit(discover).result(timeout=60)

    _server_page(page, server)

    capabilities = page.locator("#vetting-capabilities")
    expect(capabilities).to_contain_text("tools")
    expect(capabilities).not_to_contain_text("{")
