"""The admin's tables fit a 1366 px screen beside the menu and filters, and a 390 px phone."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.servers.models import McpServer, Tool
from tests.browser.test_review_queue import _a_busy_registry

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
