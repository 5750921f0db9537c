"""Error pages in a browser: the admin's look, what happened, and links back to work."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import PageProblems, sign_in
from tests.factories import McpServerFactory, UserFactory


def _has_the_way_back(page: Page) -> None:
    expect(page.locator("#site-name")).to_have_text("Toolroom")
    expect(page.locator(".breadcrumbs a", has_text="Home")).to_be_visible()
    for name in ("The review queue", "Servers", "Tools", "Fleet status"):
        expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()


def test_a_missing_page_is_an_admin_page_with_a_way_back(
    page: Page, page_problems: PageProblems, live_server
):
    page_problems.expect_status(404, r"/no-such-page/$")

    response = page.goto("/no-such-page/")

    assert response is not None
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Not found (404)")
    expect(page.locator("#content-main")).to_contain_text("/no-such-page/")
    _has_the_way_back(page)
    expect(page.get_by_role("link", name="Sign in", exact=True)).to_be_visible()


def test_a_refused_page_says_who_is_signed_in_and_where_to_go(
    page: Page, page_problems: PageProblems, transactional_db
):
    UserFactory(username="dana", is_staff=True)  # staff, but may not review servers
    server = McpServerFactory()
    sign_in(page, "dana")
    page_problems.expect_status(403, rf"/admin/servers/mcpserver/{server.pk}/decide/approve/$")

    response = page.goto(f"/admin/servers/mcpserver/{server.pk}/decide/approve/")

    assert response is not None
    assert response.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed (403)")
    expect(page.locator("#content-main")).to_contain_text("Your account (dana) may not do this")
    expect(page.locator("#user-tools")).to_contain_text("dana")
    _has_the_way_back(page)
