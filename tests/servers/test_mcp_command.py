"""`manage.py mcp`: the operator's command line, through the same services as the admin."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from registry.audit.models import AuditEvent
from registry.servers.models import (
    DiscoveryRun,
    ItemReview,
    McpServer,
    ServerPrompt,
    ServerResource,
    ServerStatus,
    Tool,
)
from tests.factories import McpServerFactory, ToolFactory
from tests.mcp_fixtures import scenario_argv

pytestmark = [pytest.mark.django_db, pytest.mark.processes]

FINDING = {
    "kind": "instructions_to_model",
    "severity": "high",
    "location": "description",
    "message": "Text aimed at the model",
    "excerpt": "<IMPORTANT>",
}


def mcp(*args):
    out = io.StringIO()
    call_command("mcp", *args, stdout=out)
    return out.getvalue()


def test_discover_inline_prints_the_vetting_report():
    McpServerFactory(slug="scenario", command=scenario_argv())

    out = mcp("discover", "scenario", "--inline")

    assert "scenario: 3 tools, 1 resources, 1 prompts" in out
    assert "server scenario 1.0.0, protocol 2026-07-28" in out
    assert "added: " in out
    assert DiscoveryRun.objects.get().status == "succeeded"


def test_discover_all_shows_progress_and_fails_when_one_fails():
    McpServerFactory(slug="a-good", command=scenario_argv())
    McpServerFactory(slug="b-broken", command=["/nope/mcp"])

    with pytest.raises(CommandError, match="1 discovery run"):
        mcp("discover", "--all", "--inline")


def test_discover_without_a_worker_says_what_to_do():
    McpServerFactory(slug="scenario", command=scenario_argv())
    with pytest.raises(CommandError, match="No worker has picked the work up"):
        mcp("discover", "scenario", "--timeout", "1")


def test_discover_async_only_queues():
    McpServerFactory(slug="scenario")
    out = mcp("discover", "scenario", "--async")
    assert "queued discovery #" in out
    assert DiscoveryRun.objects.get().status == "queued"


def test_an_unknown_slug_is_named():
    with pytest.raises(CommandError, match="No server with the slug 'nope'"):
        mcp("discover", "nope")


def test_status_prints_the_fleet():
    server = McpServerFactory(slug="clock", review_status="approved")
    ServerStatus.objects.filter(server=server).update(
        health="unhealthy", last_error="refused\nmore"
    )
    ToolFactory(server=server)

    out = mcp("status")

    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["SERVER", "REVIEW", "HEALTH", "TOOLS"]
    assert row.split()[:4] == ["clock", "approved", "unhealthy", "0/1"]
    assert row.rstrip().endswith("refused")


def test_check_records_health():
    McpServerFactory(slug="ok", review_status="approved", command=scenario_argv())
    out = mcp("check", "ok")
    assert out.startswith("ok: ok in ")
    assert ServerStatus.objects.get(server__slug="ok").health == "healthy"


def test_approve_submits_a_draft_first():
    McpServerFactory(slug="clock", trust_tier="builtin")
    mcp("approve", "clock")
    assert McpServer.objects.get(slug="clock").review_status == "approved"
    events = AuditEvent.objects.order_by("id")
    assert list(events.values_list("action", flat=True)) == [
        "server.pending_review",
        "server.approved",
    ]
    assert all(label.startswith("cli") for label in events.values_list("actor_label", flat=True))


def test_approve_tools_refuses_flagged_tools_unless_acknowledged():
    server = McpServerFactory(slug="clock")
    clean = ToolFactory(server=server, name="clean")
    flagged = ToolFactory(server=server, name="flagged", findings=[FINDING])

    with pytest.raises(CommandError, match="scanner findings"):
        mcp("approve-tools", "clock", "--all")
    assert Tool.objects.get(pk=clean.pk).is_approved
    assert not Tool.objects.get(pk=flagged.pk).is_approved

    mcp("approve-tools", "clock", "--tool", "flagged", "--acknowledge-findings")
    assert Tool.objects.get(pk=flagged.pk).is_approved


def test_approve_tools_needs_names_or_all():
    McpServerFactory(slug="clock")
    with pytest.raises(CommandError, match="--tool NAME"):
        mcp("approve-tools", "clock")
    with pytest.raises(CommandError, match="no tool named ghost"):
        mcp("approve-tools", "clock", "--tool", "ghost")


def test_review_items_approves_and_hides_resources_and_prompts():
    server = McpServerFactory(slug="clock")
    resource = ServerResource(server=server, uri="memo://a", name="a")
    resource.refresh_definition_hash()
    resource.save()
    prompt = ServerPrompt(server=server, name="p")
    prompt.refresh_definition_hash()
    prompt.save()

    out = mcp("review-items", "clock", "approve", "--all")
    assert "2 item(s) done, 0 skipped." in out
    assert ServerResource.objects.get(pk=resource.pk).is_approved
    mcp("review-items", "clock", "hide", "--prompt", "p", "--note", "spam")
    assert ServerPrompt.objects.get(pk=prompt.pk).review_state == ItemReview.HIDDEN
    with pytest.raises(CommandError, match="no resource memo://ghost"):
        mcp("review-items", "clock", "approve", "--resource", "memo://ghost")


def test_start_refuses_an_unapproved_server():
    McpServerFactory(slug="clock")
    with pytest.raises(CommandError, match="only approved servers"):
        mcp("start", "clock")
