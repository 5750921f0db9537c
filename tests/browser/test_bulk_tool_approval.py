"""The tool list's "approve selected" says what it will do and what it did, and keeps the list's
filter on return."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from registry.servers.models import ReviewStatus, Tool
from tests.factories import McpServerFactory, ToolFactory

FINDING = {"kind": "instruction", "message": "Text aimed at the model", "excerpt": "<IMPORTANT>"}


def test_bulk_approval_counts_what_it_approves_and_skips_and_keeps_the_filter(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Files", review_status=ReviewStatus.APPROVED)
    ToolFactory(server=server, name="read_file")
    ToolFactory(server=server, name="poisoned_a", findings=[FINDING])
    ToolFactory(server=server, name="poisoned_b", findings=[FINDING])
    list_url = "/admin/servers/tool/?review=awaiting"
    page.goto(list_url)
    expect(page.locator("#result_list tbody tr")).to_have_count(3)

    page.locator("#action-toggle").check()
    page.locator("select[name=action]").select_option("approve_selected")
    page.locator("button[name=index]").click()  # the actions bar's "Go"

    expect(page.locator("h1")).to_have_text("Approve 1 of 3 tools (2 flagged, skipped)")
    expect(page.locator("#confirm-tools li")).to_have_text([re.compile("read_file")])
    expect(page.locator("#skipped-tools li")).to_have_count(2)
    page.get_by_label("Note (recorded with every approval)").fill("A harmless reader.")
    page.get_by_role("button", name="Approve 1 of 3 tools (2 flagged, skipped)").click()

    expect(page.locator(".messagelist")).to_contain_text(
        "Approved 1 of 3 tools (2 flagged, skipped)."
    )
    assert "review=awaiting" in page.url
    expect(page.locator("#result_list tbody th")).to_have_text(["poisoned_a", "poisoned_b"])
    assert Tool.objects.get(name="read_file").is_approved
