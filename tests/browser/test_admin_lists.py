"""The admin's lists at 1280x800: Fleet and the server list count the same awaiting tools and say
what they count; the server list, Tool calls and Audit events show their important columns."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.servers.models import ReviewStatus
from registry.servers.vetting import tool_sync
from tests.factories import McpServerFactory, tool_definition


def _servers_with_waiting_tools() -> None:
    approved = McpServerFactory(name="In use", review_status=ReviewStatus.APPROVED)
    pending = McpServerFactory(name="In review", review_status=ReviewStatus.PENDING_REVIEW)
    draft = McpServerFactory(name="Draft one")
    retired = McpServerFactory(name="Retired one", review_status=ReviewStatus.RETIRED)
    tool_sync.server_tools_sync(server=approved, tools=[tool_definition("a"), tool_definition("b")])
    tool_sync.server_tools_sync(server=pending, tools=[tool_definition("c")])
    tool_sync.server_tools_sync(server=draft, tools=[tool_definition("d")])
    tool_sync.server_tools_sync(server=retired, tools=[tool_definition("e")])


def test_fleet_and_the_server_list_count_the_same_awaiting_tools(admin_page: Page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    _servers_with_waiting_tools()

    page.goto("/admin/servers/mcpserver/fleet/")
    expect(page.locator("#fleet-tools-awaiting a")).to_have_text("3")
    expect(page.locator("#fleet-awaiting-explained")).to_contain_text(
        "not approved at their current definition, of servers in review or in use"
    )

    page.goto("/admin/servers/mcpserver/")
    cells = page.locator("#result_list tbody td.field-tools_awaiting")
    counted = [text.strip() for text in cells.all_inner_texts()]
    assert sum(int(text) for text in counted if text.isdigit()) == 3
    for name in ("Draft one", "Retired one"):
        row = page.locator("#result_list tbody tr", has_text=name)
        expect(row.locator("td.field-tools_awaiting")).to_have_text("\u2013")  # an en dash
    expect(page.locator("#awaiting-explained")).to_contain_text("Tools awaiting approval")


# The columns that matter on each list, by their header text (the server list's name column is
# the row's header cell).
IMPORTANT_COLUMNS = {
    "/admin/servers/mcpserver/": ["Name", "Status", "Health", "Tools", "Approved", "Awaiting"],
    "/admin/gateway/toolcall/": [
        "Started at",
        "Name",
        "Team",
        "Caller",
        "Outcome",
        "Error class",
        "Duration",
        "Via",
    ],
    "/admin/audit/auditevent/": ["When", "Who", "Action", "Target", "Summary"],
}

CUT_OFF_COLUMNS = """
(names) => {
  const box = document.querySelector('.results') || document.body;
  const edge = Math.min(box.getBoundingClientRect().right, document.documentElement.clientWidth);
  const heads = [...document.querySelectorAll('#result_list thead th')];
  const out = [];
  for (const name of names) {
    const th = heads.find(h => h.innerText.trim().toLowerCase() === name.toLowerCase());
    if (!th) { out.push(name + ' (missing)'); continue; }
    const r = th.getBoundingClientRect();
    if (r.right > edge + 1 || r.width < 8)
      out.push(`${name} (right ${Math.round(r.right)} > ${Math.round(edge)})`);
  }
  return out;
}
"""


def _busy_lists() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from registry.audit.models import AuditEvent
    from registry.gateway.services import ToolCallRecord, tool_calls_record
    from tests.factories import TeamFactory

    _servers_with_waiting_tools()
    team = TeamFactory(slug="data-platform-reporting", name="Data platform reporting")
    started = (timezone.now() - timedelta(minutes=5)).timestamp()
    tool_calls_record(
        records=[
            ToolCallRecord(
                started_at=started,
                duration_ms=1234.5,
                name="document-archive__search_documents_by_full_text",
                via="mcp",
                outcome="upstream_error",
                error_class="upstream_timeout",
                error="The server did not answer within 30 s",
                team_id=team.pk,
                token_name="nightly-report-builder-agent",
                role_name="analyst",
            )
        ]
    )
    AuditEvent.objects.create(
        actor_label="alice.administrator@example.org",
        action="access_request.approved",
        target_type="access_request",
        target_id="1",
        target_repr="Data platform reporting asked for document-archive",
        summary="Approved the request of Data platform reporting for document-archive until "
        "2027-01-31, with the note: the quarterly reports need the archive.",
    )


def test_the_lists_show_their_important_columns_at_1280x800(admin_page: Page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    _busy_lists()
    problems = {}
    for url, columns in IMPORTANT_COLUMNS.items():
        page.goto(url)
        cut = page.evaluate(CUT_OFF_COLUMNS, columns)
        if cut:
            problems[url] = cut
        assert int(page.evaluate("document.documentElement.scrollWidth")) <= 1280, url
    assert not problems, f"columns cut off at 1280x800: {problems}"


def test_the_filter_panel_opens_on_demand_and_stays_open(admin_page: Page):
    page = admin_page
    page.set_viewport_size({"width": 1280, "height": 800})
    _busy_lists()
    page.goto("/admin/gateway/toolcall/")
    panel = page.locator("#changelist-filter")
    expect(panel).to_be_hidden()

    page.get_by_role("button", name="Show filters").click()
    expect(panel).to_be_visible()
    panel.get_by_role("link", name="upstream_timeout").click()

    expect(page.locator("#changelist-filter")).to_be_visible()  # still open after the reload
    expect(page.get_by_role("button", name="Hide filters (filtered)")).to_be_visible()
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    page.get_by_role("button", name="Hide filters (filtered)").click()
    expect(page.locator("#changelist-filter")).to_be_hidden()
