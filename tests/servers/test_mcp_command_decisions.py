"""`manage.py mcp approve | suspend | resume | revoke-tools`: review decisions from a shell,
through the admin's services, each one transaction."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from registry.audit.models import AuditEvent
from registry.servers.models import ApprovalState, McpServer, Tool
from registry.servers.policy import TrustTier
from registry.servers.services import tool_approve
from tests.factories import McpServerFactory, ToolFactory

pytestmark = pytest.mark.django_db


def mcp(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp", *args, stdout=out)
    return out.getvalue()


def test_approve_without_a_required_note_leaves_a_draft_a_draft():
    McpServerFactory(slug="notes", trust_tier=TrustTier.COMMUNITY, isolation="sandbox")

    with pytest.raises(CommandError, match="needs a note saying what was reviewed"):
        mcp("approve", "notes")

    assert McpServer.objects.get(slug="notes").review_status == "draft"
    assert not AuditEvent.objects.filter(action="server.pending_review").exists()


def test_approve_with_the_note_submits_and_approves():
    McpServerFactory(slug="notes", trust_tier=TrustTier.COMMUNITY, isolation="sandbox")

    mcp("approve", "notes", "--note", "read the code")

    assert McpServer.objects.get(slug="notes").review_status == "approved"


def test_suspend_and_resume_a_server():
    McpServerFactory(slug="clock", review_status="approved")

    assert "clock is suspended." in mcp("suspend", "clock", "--reason", "leaks data")
    assert McpServer.objects.get(slug="clock").review_status == "suspended"
    assert AuditEvent.objects.filter(action="server.suspended").get().details == {
        "reason": "leaks data"
    }

    assert "clock is approved again." in mcp("resume", "clock")
    assert McpServer.objects.get(slug="clock").review_status == "approved"


def test_suspend_needs_a_reason():
    McpServerFactory(slug="clock", review_status="approved")

    with pytest.raises(CommandError, match="--reason"):
        mcp("suspend", "clock")


def test_resume_refuses_a_server_that_is_not_suspended():
    McpServerFactory(slug="clock", review_status="draft")

    with pytest.raises(CommandError, match="only a suspended server can be resumed"):
        mcp("resume", "clock")

    assert McpServer.objects.get(slug="clock").review_status == "draft"


def _approved_tool(server: McpServer, name: str) -> Tool:
    tool = ToolFactory(server=server, name=name)
    tool_approve(actor="test", tool=tool, note="ok")
    return tool


def test_revoke_tools_revokes_the_named_tools_and_audits_them():
    server = McpServerFactory(slug="clock", review_status="approved")
    now = _approved_tool(server, "now")
    later = _approved_tool(server, "later")

    out = mcp("revoke-tools", "clock", "--tool", "now", "--reason", "returns secrets")

    assert "now: revoked" in out
    assert Tool.objects.get(pk=now.pk).approval_state == ApprovalState.REVOKED
    assert Tool.objects.get(pk=later.pk).is_approved
    event = AuditEvent.objects.get(action="tool.revoked")
    assert event.details == {"reason": "returns secrets"}


def test_revoke_tools_all_revokes_every_approved_tool():
    server = McpServerFactory(slug="clock", review_status="approved")
    _approved_tool(server, "now")
    _approved_tool(server, "later")
    ToolFactory(server=server, name="never")

    out = mcp("revoke-tools", "clock", "--all", "--reason", "server compromised")

    assert "2 tool(s) revoked." in out
    assert not any(tool.is_approved for tool in Tool.objects.filter(server=server))


def test_revoke_tools_names_an_unknown_tool_and_needs_a_choice():
    McpServerFactory(slug="clock", review_status="approved")

    with pytest.raises(CommandError, match="has no tool named ghost"):
        mcp("revoke-tools", "clock", "--tool", "ghost", "--reason", "x")
    with pytest.raises(CommandError, match="--tool NAME, or revoke every tool with --all"):
        mcp("revoke-tools", "clock", "--reason", "x")
