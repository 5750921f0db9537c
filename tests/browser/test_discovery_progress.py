"""'Discover now' shows the run's progress and the page refreshes itself when it ends (issue 28).

A real discovery of the SDK scenario server (tests/mcp_servers) runs in a thread of its own, as a
worker would (tests.discovery_helpers.discover_inline), while the browser polls the run's status.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections
from playwright.sync_api import Page, expect

from registry.servers.models import DiscoveryRun, DiscoveryStatus, McpServer
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from tests.mcp_fixtures import scenario_argv

# The page polls every 1.5 s; a run's end shows within a few polls.
SEEN_WITHIN_MS = 15_000


def _discover_in_background(pool: ThreadPoolExecutor, server: McpServer) -> Future[DiscoveryRun]:
    def run() -> DiscoveryRun:
        try:
            return discover_inline(server)
        finally:
            connections.close_all()

    return pool.submit(run)


def _press_discover_now(page: Page, server: McpServer) -> DiscoveryRun:
    page.goto(f"/admin/servers/mcpserver/{server.pk}/change/")
    page.get_by_role("button", name="Discover now").click()
    run = DiscoveryRun.objects.get(server=server)
    page.wait_for_url(re.compile(rf"\?discovery={run.pk}$"))
    progress = page.locator("#discovery-progress")
    expect(progress.locator(".discovery-state")).to_have_text("Queued")
    expect(progress).to_contain_text("this page refreshes itself when it ends")
    # Marks this load of the page: a page that loads again by itself no longer has it.
    page.evaluate("window.loadedBeforeTheRunEnded = true")
    return run


def test_the_page_follows_a_discovery_and_refreshes_when_it_succeeds(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Scenario", command=scenario_argv())
    run = _press_discover_now(page, server)
    expect(page.locator("#server-tools")).not_to_contain_text("echo")

    with ThreadPoolExecutor(max_workers=1) as pool:
        done = _discover_in_background(pool, server)
        progress = page.locator("#discovery-progress")
        expect(progress.locator(".discovery-state")).to_have_text(
            "Succeeded", timeout=SEEN_WITHIN_MS
        )
        assert done.result(timeout=60).pk == run.pk

    expect(progress).to_contain_text("3 tools found")
    assert page.evaluate("window.loadedBeforeTheRunEnded") is None, "the page did not reload"
    tools = page.locator("#server-tools")
    for name in ("add", "echo", "sleep"):
        expect(tools.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.locator("#server-discoveries")).to_contain_text("Succeeded")


def test_the_page_shows_a_discovery_running_then_failed(admin_page: Page, settings):
    settings.TOOLROOM_DISCOVERY_TIMEOUT_SECONDS = 6
    page = admin_page
    server = McpServerFactory(name="Hangs", command=scenario_argv("--hang-on", "list"))
    run = _press_discover_now(page, server)

    with ThreadPoolExecutor(max_workers=1) as pool:
        done = _discover_in_background(pool, server)
        state = page.locator("#discovery-progress .discovery-state")
        expect(state).to_have_text("Running", timeout=SEEN_WITHIN_MS)
        expect(state).to_have_text("Failed", timeout=SEEN_WITHIN_MS)
        assert done.result(timeout=60).status == DiscoveryStatus.FAILED

    progress = page.locator("#discovery-progress")
    expect(progress).to_have_class("discovery-failed")
    run.refresh_from_db()
    expect(progress).to_contain_text(run.error[:40])
    assert page.evaluate("window.loadedBeforeTheRunEnded") is None, "the page did not reload"
