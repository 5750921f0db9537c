"""The admin's CSV export of Tool calls and Audit events (filtered, streamed, staff only) and its
search across servers, tools, teams and people."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.gateway.services import ToolCallRecord, tool_calls_record
from tests.factories import McpServerFactory, TeamFactory, ToolFactory, UserFactory

pytestmark = pytest.mark.django_db


def _record(name: str, *, outcome: str = "ok", team_id=None) -> ToolCallRecord:
    return ToolCallRecord(
        started_at=(timezone.now() - timedelta(minutes=1)).timestamp(),
        duration_ms=12.5,
        name=name,
        via="mcp",
        outcome=outcome,
        team_id=team_id,
    )


def _rows(response) -> list[dict[str, str]]:
    assert isinstance(response, StreamingHttpResponse)
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_the_tool_call_export_streams_the_rows_the_filtered_list_shows(client, alice):
    team = TeamFactory(slug="alpha")
    tool_calls_record(
        records=[
            _record("files__read_file", team_id=team.pk),
            _record("files__write_file", outcome="refused", team_id=team.pk),
            _record("=cmd|calc", outcome="refused"),
        ]
    )
    client.force_login(alice)
    url = reverse("admin:gateway_toolcall_export")

    everything = _rows(client.get(url))
    refused = _rows(client.get(url, {"outcome": "refused"}))
    searched = _rows(client.get(url, {"outcome": "refused", "q": "write"}))

    assert sorted(row["name"] for row in everything) == [
        "'=cmd|calc",  # a formula is written as text, never run by a spreadsheet
        "files__read_file",
        "files__write_file",
    ]
    assert sorted(row["name"] for row in refused) == ["'=cmd|calc", "files__write_file"]
    assert [(row["name"], row["team"], row["duration_ms"]) for row in searched] == [
        ("files__write_file", "alpha", "12.5")
    ]
    page = client.get(reverse("admin:gateway_toolcall_changelist"), {"outcome": "refused"})
    assert b'href="export.csv?outcome=refused"' in page.content


def test_the_audit_export_honours_the_filters_and_is_for_staff_only(client, alice):
    AuditEvent.objects.create(
        actor_label="alice",
        action="server.approved",
        target_type="server",
        target_id="1",
        target_repr="files",
        summary="Approved files.",
    )
    AuditEvent.objects.create(
        actor_label="bob",
        action="grant.created",
        target_type="grant",
        target_id="2",
        target_repr="alpha: files",
        summary="Granted.",
    )
    url = reverse("admin:audit_auditevent_export")

    signed_out = client.get(url)
    client.force_login(UserFactory(username="mia"))  # not staff
    member = client.get(url)
    client.force_login(alice)
    approvals = _rows(client.get(url, {"action": "server.approved"}))

    assert signed_out.status_code == 302
    assert "/admin/login/" in signed_out["Location"]
    assert member.status_code == 302
    assert "/admin/login/" in member["Location"]
    assert [(row["actor"], row["action"], row["summary"]) for row in approvals] == [
        ("alice", "server.approved", "Approved files.")
    ]


def test_staff_without_the_view_permission_cannot_export(client):
    clerk = UserFactory(username="clerk", is_staff=True)
    client.force_login(clerk)

    response = client.get(reverse("admin:gateway_toolcall_export"))

    assert response.status_code == 403


def test_the_admin_search_finds_servers_tools_teams_and_people(client, alice):
    files = McpServerFactory(name="Files", slug="files")
    ToolFactory(server=files, name="read_file")
    McpServerFactory(name="Weather", slug="weather")
    TeamFactory(slug="file-keepers", name="File keepers")
    UserFactory(username="filippa", email="filippa@example.org")
    client.force_login(alice)

    response = client.get(reverse("admin_search"), {"q": "fil"})
    nothing = client.get(reverse("admin_search"), {"q": "zzz"})

    text = response.content.decode()
    assert response.status_code == 200
    for found in ("Files", "Files / read_file", "File keepers", "filippa"):
        assert found in text
    assert "Weather" not in text
    assert "Nothing matches" in nothing.content.decode()
    assert 'id="admin-search"' in client.get(reverse("admin:index")).content.decode()


def test_the_admin_search_shows_only_what_the_staff_member_may_view(client):
    McpServerFactory(name="Files", slug="files")
    UserFactory(username="filippa")
    client.force_login(UserFactory(username="clerk", is_staff=True))

    response = client.get(reverse("admin_search"), {"q": "fil"})

    assert "filippa" not in response.content.decode()
    assert "admin-search-servers" not in response.content.decode()
