"""The gateway's admin pages and the call audit's retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from registry.audit.models import AuditEvent
from registry.gateway.models import ServerGatewayPolicy, ToolCall
from registry.gateway.services import ToolCallRecord, tool_calls_prune, tool_calls_record
from tests.factories import McpServerFactory, TeamFactory
from workers.tasks import prune_gateway_calls

pytestmark = pytest.mark.django_db


def _record(name: str, *, days_ago: float, outcome: str = "ok", team_id=None) -> ToolCallRecord:
    started = (timezone.now() - timedelta(days=days_ago)).timestamp()
    return ToolCallRecord(
        started_at=started, duration_ms=1.5, name=name, via="mcp", outcome=outcome, team_id=team_id
    )


def test_the_call_audit_page_lists_and_filters_calls(client, alice):
    team = TeamFactory(slug="alpha")
    tool_calls_record(
        records=[
            _record("files__read_file", days_ago=0, team_id=team.pk),
            _record("files__write_file", days_ago=0, outcome="refused", team_id=team.pk),
        ]
    )
    client.force_login(alice)
    url = reverse("admin:gateway_toolcall_changelist")

    everything = client.get(url)
    refused = client.get(url, {"outcome": "refused"})

    assert everything.status_code == 200
    assert b"files__read_file" in everything.content
    assert b"files__write_file" in refused.content
    assert b"files__read_file" not in refused.content


def test_the_retention_clean_up_deletes_old_calls_only(settings):
    settings.TOOLROOM_GATEWAY_CALL_RETENTION_DAYS = 30
    tool_calls_record(records=[_record("old", days_ago=31), _record("new", days_ago=29)])

    assert prune_gateway_calls() == 1

    assert list(ToolCall.objects.values_list("name", flat=True)) == ["new"]
    assert tool_calls_prune(keep_days=30) == 0
    assert PeriodicTask.objects.get(name="Gateway call audit prune").task == (
        "toolroom.gateway_calls_prune"
    )


def test_the_server_page_shows_the_gateway_policy_and_its_change_is_audited(client, alice):
    server = McpServerFactory(slug="files")
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    assert b"On demand, stopped when idle" in page.content
    assert b"isolation: Per team" in page.content

    response = client.post(
        reverse("admin:gateway_servergatewaypolicy_add"),
        {
            "server": server.pk,
            "mode": "always_warm",
            "isolation_scope": "conversation",
            "call_deadline_seconds": "2.5",
            "max_call_seconds": "30",
            "max_concurrency": "4",
            "queue_limit": "8",
            "idle_stop_seconds": "600",
        },
    )

    assert response.status_code == 302
    policy = ServerGatewayPolicy.objects.get(server=server)
    assert (policy.mode, policy.isolation_scope, policy.call_deadline_seconds) == (
        "always_warm",
        "conversation",
        2.5,
    )
    assert AuditEvent.objects.filter(action="server.gateway_policy_changed").count() == 1
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    assert b"isolation: Per conversation" in page.content
    assert b"deadline 2.5 s, up to 30 s while the server reports progress" in page.content


def test_calls_of_a_team_or_server_deleted_before_the_batch_is_written_are_kept():
    """The gateway writes its call records in batches, later: a team or server deleted in
    between loses its link, never the record (before, the whole batch failed on the foreign key
    and was kept for a retry that failed forever)."""
    team, server = TeamFactory(slug="alpha"), McpServerFactory(slug="files")
    gone_team, gone_server = TeamFactory(slug="gone"), McpServerFactory(slug="gone")
    gone_team_id, gone_server_id = gone_team.pk, gone_server.pk
    gone_team.delete()
    gone_server.delete()
    kept = ToolCallRecord(
        started_at=timezone.now().timestamp(),
        duration_ms=1.0,
        name="files__read",
        via="mcp",
        outcome="ok",
        team_id=team.pk,
        server_id=server.pk,
        server_slug="files",
    )
    orphan = ToolCallRecord(
        started_at=timezone.now().timestamp(),
        duration_ms=1.0,
        name="gone__read",
        via="mcp",
        outcome="ok",
        team_id=gone_team_id,
        server_id=gone_server_id,
        server_slug="gone",
        token_name="agent-0",
    )

    assert tool_calls_record(records=[kept, orphan]) == 2

    rows = {row.name: row for row in ToolCall.objects.all()}
    assert (rows["files__read"].team_id, rows["files__read"].server_id) == (team.pk, server.pk)
    assert (rows["gone__read"].team_id, rows["gone__read"].server_id) == (None, None)
    assert (rows["gone__read"].server_slug, rows["gone__read"].token_name) == ("gone", "agent-0")
