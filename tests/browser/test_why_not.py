"""The admin's "Why not?" page in Chromium (issue 28): facts in words with readable contrast
(they were Python reprs in a 1.15:1 box), and a tool picker that suggests the catalogue's names."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.teams import services
from tests.browser.test_portal import CONTRAST_SCRIPT
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import TeamFactory

SCOPED = CONTRAST_SCRIPT.replace(
    "document.querySelectorAll('body *')", "document.querySelectorAll('fieldset.module *')"
)


def test_why_not_reads_in_words_with_contrast_and_a_tool_picker(admin_page: Page):
    page = admin_page
    team = TeamFactory(slug="alpha", name="Alpha")
    files = approved_server("files", {"read_file": READ, "write_file": WRITE})
    services.grant_create(actor="test", team=team, server=files)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"/admin/teams/team/{team.pk}/why-not/")

    options = page.eval_on_selector_all("#tool-names option", "els => els.map(e => e.value)")
    assert options == ["files__read_file", "files__write_file"]
    page.get_by_label("Tool (catalogue name").fill("files__read_file")
    page.get_by_role("button", name="Explain tool").click()

    module = page.locator("fieldset.module").first
    expect(module).to_contain_text("isolation scope")
    expect(module).not_to_contain_text("IsolationScope")
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        assert page.evaluate(SCOPED) == [], f"low contrast in the {theme} theme"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280
