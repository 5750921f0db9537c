"""The admin's tables fit a 1366 px screen beside the menu and filters, and a 390 px phone."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.servers import services
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.servers.vetting import tool_sync
from tests.browser.test_review_queue import _a_busy_registry
from tests.factories import McpServerFactory, tool_definition

LISTS = [
    "/admin/servers/mcpserver/",
    "/admin/servers/tool/",
    "/admin/audit/auditevent/",
    "/admin/teams/accessrequest/",
    "/admin/teams/grant/",
    "/admin/teams/agenttoken/",
    "/admin/teams/team/",
]


def _pages() -> list[str]:
    server = McpServer.objects.get(name="Live")
    tool = Tool.objects.get(server=server, name="b")
    return [
        "/admin/",
        *LISTS,
        "/admin/servers/mcpserver/fleet/",
        f"/admin/servers/mcpserver/{server.pk}/change/",
        f"/admin/servers/tool/{tool.pk}/change/",
    ]


def _page_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_lists_show_every_column_on_a_1366_px_screen(admin_page: Page):
    page = admin_page
    _a_busy_registry()
    for url in _pages():
        page.goto(url)
        assert _page_width(page) <= 1366, f"{url} scrolls sideways"
    for url in LISTS:
        page.goto(url)
        # The results box scrolls what does not fit: nothing may be hidden in it.
        hidden = page.evaluate(
            "(() => { const box = document.querySelector('.results');"
            " return box ? box.scrollWidth - box.clientWidth : 0; })()"
        )
        assert hidden <= 0, f"{url} hides {hidden} px of its table"


def test_the_audit_list_shows_its_summary(admin_page: Page):
    page = admin_page
    _a_busy_registry()
    page.goto("/admin/audit/auditevent/")

    summary = page.locator("#result_list thead th", has_text="Summary")
    expect(summary).to_be_in_viewport()
    expect(page.locator("#result_list tbody")).to_contain_text("asked for")


def test_pages_stay_within_a_390_px_phone(admin_page: Page):
    page = admin_page
    _a_busy_registry()
    page.set_viewport_size({"width": 390, "height": 844})
    for url in _pages():
        page.goto(url)
        assert _page_width(page) <= 390, f"{url} is {_page_width(page)} px wide on a phone"


def test_lists_sort_names_regardless_of_case_and_counts_link_to_their_rows(admin_page: Page):
    page = admin_page
    for name in ("beta", "Alpha", "gamma"):
        McpServerFactory(name=name, review_status=ReviewStatus.APPROVED)
    server = McpServer.objects.get(name="beta")
    tool_sync.server_tools_sync(server=server, tools=[tool_definition(n) for n in ("b", "A", "c")])
    services.tool_approve(actor="test", tool=Tool.objects.get(server=server, name="c"))
    tool_sync.server_tools_sync(server=server, tools=[tool_definition(n) for n in ("b", "A")])

    page.goto("/admin/servers/mcpserver/")
    expect(page.locator("#result_list tbody th")).to_have_text(["Alpha", "beta", "gamma"])
    row = page.locator("#result_list tbody tr", has_text="beta")
    awaiting = row.locator("td.field-tools_awaiting a")
    expect(awaiting).to_have_text("2")  # A and b; c was removed
    awaiting.click()
    expect(page.locator("#result_list tbody th")).to_have_text(["A", "b"])
