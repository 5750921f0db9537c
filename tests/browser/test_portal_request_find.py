"""Asking for access in the portal scales: find a tool by a word, ask for it, and never see what
the team already holds, at 390 px as at 1280."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.teams.models import AccessRequest
from tests.browser.test_portal import portal_sign_in, world  # noqa: F401 (the fixture)
from tests.catalogue_helpers import tool_of


def test_a_member_finds_one_tool_and_asks_for_it(page: Page, world):  # noqa: F811
    clock = world["clock"]
    page.set_viewport_size({"width": 390, "height": 844})
    portal_sign_in(page, "dave")
    page.goto("/portal/teams/alpha/requests/")
    options = page.locator("#id_target option")
    expect(options.filter(has_text="files:")).to_have_count(0)  # alpha holds files already

    page.get_by_label("Find a server, tool or category").fill("get_time")
    page.get_by_role("button", name="Find").click()

    expect(page.locator("#find-result")).to_contain_text("1 choice matches")
    expect(options).to_have_text(["Choose a server or tool", "Clock: get_time"])
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at a 390 px viewport"
    page.get_by_label("Server or tool").select_option(f"tool:{tool_of(clock, 'get_time').pk}")
    page.get_by_label("Why the team needs it").fill("Timestamps in reports.")
    page.get_by_role("button", name="Send the request").click()

    expect(page.locator(".messages")).to_contain_text("on its way to the admins")
    asked = AccessRequest.objects.get(justification="Timestamps in reports.")
    assert asked.tool == tool_of(clock, "get_time")


def test_browse_asks_for_the_one_tool_that_matched(page: Page, world):  # noqa: F811
    clock = world["clock"]
    page.set_viewport_size({"width": 390, "height": 844})
    portal_sign_in(page, "dave")
    page.goto("/portal/browse/")
    page.get_by_label("Search servers and tools").fill("get_time")
    page.get_by_role("button", name="Search").click()

    card = page.locator("article", has_text="Clock")
    expect(card.locator(".matched-note")).to_contain_text("Tools matching")
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"Browse is {width} px wide at a 390 px viewport"
    card.get_by_role("link", name="Ask for Clock get_time").click()

    expect(page.get_by_label("Server or tool")).to_have_value(
        f"tool:{tool_of(clock, 'get_time').pk}"
    )
