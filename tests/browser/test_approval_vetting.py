"""Approving servers shows their vetting, and the import page warns before builtin local
processes are vouched for (issue 28), clicked through at 1280x800."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from registry.servers.models import McpServer, ReviewStatus, ServerStatus
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory, ToolFactory

FINDING = {"kind": "instructions_to_model", "severity": "high", "location": "description"}
MCP_JSON = {
    "mcpServers": {
        "notes": {"command": "uvx", "args": ["mcp-server-notes==1.2.0"]},
        "shell-helper": {"command": "npx", "args": ["-y", "shell-helper-mcp@0.3.1"]},
        "hosted": {"type": "http", "url": "https://mcp.example.com/mcp"},
    }
}


def _fits(page: Page) -> None:
    assert int(page.evaluate("document.documentElement.scrollWidth")) <= 1280


def test_bulk_approval_shows_each_servers_verdict_flags_and_tier_policy(admin_page: Page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    clean = McpServerFactory(name="Clock", review_status=ReviewStatus.PENDING_REVIEW)
    ToolFactory(server=clean)
    ServerStatus.objects.update_or_create(server=clean, defaults={"vetting_report": {"ok": True}})
    poisoned = McpServerFactory(
        name="Files", trust_tier=TrustTier.VERIFIED, review_status=ReviewStatus.PENDING_REVIEW
    )
    ToolFactory(server=poisoned, name="read_file", findings=[FINDING])
    ToolFactory(server=poisoned, name="write_file", findings=[FINDING])
    ServerStatus.objects.update_or_create(
        server=poisoned, defaults={"vetting_report": {"ok": True}}
    )

    page.goto("/admin/servers/mcpserver/?review_status__exact=pending_review")
    page.locator("#action-toggle").check()
    page.locator("select[name=action]").select_option("approve_selected")
    page.locator("button[name=index]").click()

    table = page.locator("#approval-vetting")
    clock = table.locator("tr", has_text="Clock")
    files = table.locator("tr", has_text="Files")
    expect(clock.locator(".vetting-verdict")).to_have_text("No findings")
    expect(clock.locator(".vetting-flagged")).to_have_text("0")
    expect(clock.locator(".vetting-policy")).to_contain_text("Builtin tier: Installed and vouched")
    expect(files.locator(".vetting-verdict")).to_have_text(
        "Flagged: 2 tool(s) flagged, 2 of them not approved"
    )
    expect(files.locator(".vetting-policy")).to_contain_text("Verified tier: Reviewed publisher")
    _fits(page)

    page.get_by_role("button", name="Approve").click()

    expect(page.locator(".messagelist")).to_contain_text("done for 2 server(s)")
    assert set(McpServer.objects.values_list("review_status", flat=True)) == {"approved"}


def test_the_approval_page_links_the_flagged_tools(admin_page: Page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    server = McpServerFactory(
        name="Files",
        trust_tier=TrustTier.COMMUNITY,
        isolation="sandbox",
        review_status=ReviewStatus.PENDING_REVIEW,
    )
    ToolFactory(server=server, name="read_file", findings=[FINDING])

    page.goto(f"/admin/servers/mcpserver/{server.pk}/decide/approve/")

    row = page.locator("#approval-vetting tbody tr")
    expect(row.locator(".vetting-verdict")).to_have_text(
        "Flagged: 1 tool(s) flagged, 1 of them not approved"
    )
    expect(row.locator(".vetting-policy")).to_contain_text("Approving needs a written note.")
    _fits(page)
    row.locator(".vetting-flagged").get_by_role("link", name="1").click()
    expect(page.locator("#result_list tbody th")).to_have_text(["read_file"])


def test_the_import_plan_warns_before_builtin_runs_every_entry_as_a_local_process(
    admin_page: Page,
):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/admin/servers/mcpserver/import/")
    page.get_by_label("File").set_input_files(
        files=[
            {
                "name": "mcp.json",
                "mimeType": "application/json",
                "buffer": json.dumps(MCP_JSON).encode(),
            }
        ]
    )
    page.get_by_label("Tier").select_option("builtin")
    page.get_by_role("button", name="Check the file").click()

    warning = page.locator("#import-local-warning")
    expect(warning).to_contain_text("2 servers would run as a local process")
    expect(warning.locator("code")).to_have_text(["notes", "shell-helper"])
    expect(warning).not_to_contain_text("hosted")
    _fits(page)
    # The warning is read before the button that writes the import.
    warning_box = warning.bounding_box()
    button_box = page.get_by_role("button", name="Import").bounding_box()
    assert warning_box is not None
    assert button_box is not None
    assert warning_box["y"] < button_box["y"]
    assert not McpServer.objects.exists()
