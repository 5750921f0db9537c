"""The admin's search from the index, and the CSV export of a filtered Tool calls list."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from pathlib import Path

from django.utils import timezone
from playwright.sync_api import Page, expect

from registry.gateway.services import ToolCallRecord, tool_calls_record
from tests.factories import McpServerFactory, TeamFactory, ToolFactory, UserFactory


def test_the_index_searches_servers_tools_teams_and_people(admin_page: Page):
    page = admin_page
    files = McpServerFactory(name="Files", slug="files")
    ToolFactory(server=files, name="read_file")
    TeamFactory(slug="file-keepers", name="File keepers")
    UserFactory(username="filippa")
    page.goto("/admin/")

    page.get_by_label("Search servers, tools, teams and people").fill("fil")
    page.get_by_role("button", name="Search").click()

    expect(page.locator("#admin-search-servers")).to_contain_text("Files")
    expect(page.locator("#admin-search-tools")).to_contain_text("Files / read_file")
    expect(page.locator("#admin-search-teams")).to_contain_text("File keepers")
    expect(page.locator("#admin-search-people")).to_contain_text("filippa")
    page.locator("#admin-search-tools").get_by_role("link", name="Files / read_file").click()
    expect(page.locator("h1, h2").first).to_be_visible()
    assert "/admin/servers/tool/" in page.url


def test_the_export_link_downloads_the_filtered_calls(admin_page: Page, tmp_path: Path):
    page = admin_page
    team = TeamFactory(slug="alpha")
    started = (timezone.now() - timedelta(minutes=1)).timestamp()
    tool_calls_record(
        records=[
            ToolCallRecord(
                started_at=started,
                duration_ms=3.0,
                name=name,
                via="mcp",
                outcome=outcome,
                team_id=team.pk,
            )
            for name, outcome in (("files__read_file", "ok"), ("files__write_file", "refused"))
        ]
    )
    page.goto("/admin/gateway/toolcall/?outcome=refused")

    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    saved = tmp_path / "calls.csv"
    download.value.save_as(saved)

    rows = list(csv.DictReader(io.StringIO(saved.read_text())))
    assert [(row["name"], row["outcome"], row["team"]) for row in rows] == [
        ("files__write_file", "refused", "alpha")
    ]
