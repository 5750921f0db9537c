"""An admin's day in a real browser: import, discover, review a server, decide access, the fleet.

Each test drives the pages the way a person does (links, forms, buttons) and the `page` fixture
fails it on any console error or 4xx/5xx response. Discovery runs a real MCP server (the SDK
scenario server from tests/mcp_servers) through the same claim/discover/record steps a worker
takes (tests.discovery_helpers.discover_inline), picking up the run the admin's click queued.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.db import connections
from django.utils import timezone
from playwright.sync_api import Page, expect

from registry.servers.models import DiscoveryRun, DiscoveryStatus, McpServer, ReviewStatus, Tool
from registry.servers.policy import TrustTier
from registry.servers.vetting import tool_sync
from registry.teams.models import AccessRequestState, Grant
from registry.teams.services import access_request_create, team_member_set
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory, TeamFactory, UserFactory, tool_definition
from tests.mcp_fixtures import scenario_argv

MCP_JSON = {
    "mcpServers": {
        "clock": {"command": "python", "args": ["-m", "mcp_server_time"]},
        "notes": {"command": "npx", "args": ["-y", "@example/notes-server@1.4.0"]},
    }
}


def _discover_like_a_worker(server: McpServer) -> DiscoveryRun:
    """discover_inline in a thread of its own, as a worker would run it: Playwright's event loop
    is marked running in the test's thread, and discovery runs an event loop of its own."""

    def run() -> DiscoveryRun:
        try:
            return discover_inline(server)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result(timeout=60)


def _server_page(page: Page, server: McpServer) -> None:
    page.goto(f"/admin/servers/mcpserver/{server.pk}/change/")


def test_an_import_is_checked_first_and_written_only_when_confirmed(admin_page: Page):
    page = admin_page
    page.goto("/admin/servers/mcpserver/")
    page.get_by_role("link", name="Import servers").click()
    page.get_by_label("File").set_input_files(
        files=[
            {
                "name": "mcp.json",
                "mimeType": "application/json",
                "buffer": json.dumps(MCP_JSON).encode(),
            }
        ]
    )
    page.get_by_role("button", name="Check the file").click()

    plan = page.locator("table.import-plan")
    expect(plan).to_contain_text("clock")
    expect(plan).to_contain_text("notes")
    expect(plan.locator(".import-action-create")).to_have_count(2)
    assert not McpServer.objects.exists(), "the check (a dry run) wrote nothing"

    page.get_by_role("button", name="Import").click()

    expect(page.locator(".messagelist")).to_contain_text("2")
    assert sorted(McpServer.objects.values_list("slug", flat=True)) == ["clock", "notes"]
    assert set(McpServer.objects.values_list("review_status", flat=True)) == {ReviewStatus.DRAFT}


def test_discovery_asked_from_the_server_page_shows_the_tools_and_the_report(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Scenario", command=scenario_argv())
    _server_page(page, server)

    page.get_by_role("button", name="Discover now").click()

    expect(page.locator(".messagelist")).to_contain_text("asked the workers")
    run = DiscoveryRun.objects.get(server=server)
    assert run.status == DiscoveryStatus.QUEUED
    # The worker's part, in this process: the run the click queued is the one that runs.
    assert _discover_like_a_worker(server).pk == run.pk

    page.reload()
    tools = page.locator("#server-tools")
    for name in ("add", "echo", "sleep"):
        expect(tools.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.locator("#vetting-report")).to_contain_text("3 tools, 1 resources, 1 prompts")
    expect(page.locator("#server-discoveries")).to_contain_text("Succeeded")


def test_a_server_is_submitted_and_approved_and_the_admin_hears_what_still_waits(
    admin_page: Page,
):
    page = admin_page
    server = McpServerFactory(
        name="Scenario", command=scenario_argv(), trust_tier=TrustTier.BUILTIN
    )
    _discover_like_a_worker(server)
    _server_page(page, server)

    page.get_by_role("link", name="Submit for review").click()
    expect(page.get_by_label("Reason")).to_have_count(0)  # submitting asks for nothing
    page.get_by_role("button", name="Submit for review").click()
    expect(page.locator(".messagelist")).to_contain_text("Submit for review: done")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.PENDING_REVIEW

    page.get_by_role("link", name="Approve", exact=True).click()
    page.get_by_label("Note").fill("Read the launch spec and the vetting report.")
    page.get_by_role("button", name="Approve").click()

    messages = page.locator(".messagelist")
    expect(messages).to_contain_text("Approve: done for 1 server(s)")
    expect(messages).to_contain_text("3 tool(s) of Scenario still wait for approval")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.APPROVED
    assert server.review_note == "Read the launch spec and the vetting report."

    messages.get_by_role("link", name="review them").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(3)


def test_a_refused_server_decision_keeps_what_was_typed(admin_page: Page):
    page = admin_page
    server = McpServerFactory(name="Scenario", review_status=ReviewStatus.APPROVED)
    page.goto(f"/admin/servers/mcpserver/{server.pk}/decide/suspend/")

    # Only white space: the browser sends it, the server refuses it on the form.
    page.get_by_label("Reason").fill("   ")
    page.get_by_role("button", name="Suspend").click()

    expect(page.locator("#decision-form .errorlist")).to_contain_text("Give a reason")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.APPROVED
    expect(page.locator(".breadcrumbs")).to_contain_text("Scenario")


def test_an_access_request_is_approved_with_a_shorter_expiry_after_a_refused_one(
    admin_page: Page,
):
    page = admin_page
    member = UserFactory(username="mia")
    team = TeamFactory(slug="data", name="Data")
    team_member_set(actor="test", team=team, user=member)
    server = McpServerFactory(name="Scenario", review_status=ReviewStatus.APPROVED)
    wished = timezone.now() + timedelta(days=7)
    request = access_request_create(
        actor=member,
        team=team,
        server=server,
        justification="Nightly reports.",
        wished_expires_at=wished,
    )

    page.goto("/admin/teams/accessrequest/")
    page.get_by_role("link", name=re.compile(r"data asks for")).click()
    page.get_by_role("link", name="Approve", exact=True).click()
    expect(page.locator("#confirm-items")).to_contain_text("Nightly reports.")
    expect(page.get_by_label("Reason")).to_have_count(0)  # approving asks for a note instead

    too_late = (wished + timedelta(days=30)).astimezone(timezone.get_current_timezone())
    page.get_by_label("Note").fill("For the reporting project.")
    page.get_by_label("Expires at").fill(too_late.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Approve").click()

    expect(page.locator("#confirm-form .errorlist")).to_contain_text("shorter than the team")
    expect(page.get_by_label("Note")).to_have_value("For the reporting project.")
    expect(page.get_by_label("Expires at")).to_have_value(too_late.strftime("%Y-%m-%dT%H:%M"))
    request.refresh_from_db()
    assert request.state == AccessRequestState.PENDING

    sooner = (timezone.now() + timedelta(days=2)).astimezone(timezone.get_current_timezone())
    page.get_by_label("Expires at").fill(sooner.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Approve").click()

    expect(page.locator(".messagelist")).to_contain_text("Approved the request")
    request.refresh_from_db()
    assert request.state == AccessRequestState.APPROVED
    grant = Grant.objects.get(pk=request.grant_id)
    assert grant.expires_at is not None
    assert abs(grant.expires_at - sooner.replace(second=0, microsecond=0)) < timedelta(minutes=1)


def test_an_access_request_is_denied_with_a_reason(admin_page: Page):
    page = admin_page
    member = UserFactory(username="mia")
    team = TeamFactory(slug="data", name="Data")
    team_member_set(actor="test", team=team, user=member)
    server = McpServerFactory(name="Scenario", review_status=ReviewStatus.APPROVED)
    request = access_request_create(
        actor=member, team=team, server=server, justification="Just curious."
    )

    page.goto(f"/admin/teams/accessrequest/{request.pk}/decide/deny/")
    page.get_by_label("Reason").fill("   ")  # white space only: refused by the server
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("#confirm-form .errorlist")).to_contain_text("Say why")

    page.get_by_label("Reason").fill("Use the shared reporting server instead.")
    page.get_by_role("button", name="Deny").click()

    expect(page.locator(".messagelist")).to_contain_text("Denied the request")
    request.refresh_from_db()
    assert request.state == AccessRequestState.DENIED
    assert request.decision_reason == "Use the shared reporting server instead."


def test_the_fleet_page_counts_link_to_exactly_the_rows_counted(admin_page: Page):
    page = admin_page
    approved = McpServerFactory(name="Approved one", review_status=ReviewStatus.APPROVED)
    draft = McpServerFactory(name="Draft one")
    tool_sync.server_tools_sync(server=approved, tools=[tool_definition("a"), tool_definition("b")])
    tool_sync.server_tools_sync(server=draft, tools=[tool_definition("c")])

    page.goto("/admin/servers/mcpserver/fleet/")
    link = page.locator("#fleet-tools-awaiting a")
    expect(link).to_have_text("2")
    link.click()

    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#result_list")).not_to_contain_text("Draft one")
    assert Tool.objects.count() == 3


def test_an_untrusted_approval_needs_a_note_and_keeps_it_when_refused(admin_page: Page):
    page = admin_page
    server = McpServerFactory(
        name="Untrusted one",
        trust_tier=TrustTier.UNTRUSTED,
        isolation="sandbox",
        review_status=ReviewStatus.PENDING_REVIEW,
    )
    page.goto(f"/admin/servers/mcpserver/{server.pk}/decide/approve/")
    expect(page.locator("#decision-form")).to_contain_text("Required for this tier")

    page.get_by_label("Note").fill("   ")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#decision-form .errorlist")).to_contain_text("Say what was reviewed")

    # With a note, the tier still wants a vetting report: refused, and the note stays.
    page.get_by_label("Note").fill("Read the source on GitHub.")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#decision-form .errorlist")).to_contain_text("vetting report")
    expect(page.get_by_label("Note")).to_have_value("Read the source on GitHub.")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.PENDING_REVIEW
