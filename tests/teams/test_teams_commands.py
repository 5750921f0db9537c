"""The operators' commands: create_team, grant (and --revoke), create_agent_token,
load_demo_teams; all through the services, all audited."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from registry.audit.models import AuditEvent
from registry.teams.models import AgentToken, Grant, Team
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import READ, approved_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


def _run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_it_creates_a_team_grants_and_revokes(committed):
    approved_server("files", {"read_file": READ, "stat": READ})
    _run("create_team", "alpha", "--name", "Alpha squad")
    _run("grant", "--team", "alpha", "--server", "files", "--expires", "2099-01-01T00:00:00Z")
    _run("grant", "--team", "alpha", "--server", "files", "--tool", "stat", "--role", "review")

    assert Team.objects.get(slug="alpha").name == "Alpha squad"
    assert Grant.objects.filter(revoked_at__isnull=True).count() == 2
    assert Grant.objects.get(tool=None).expires_at.year == 2099

    _run(
        "grant",
        "--team",
        "alpha",
        "--server",
        "files",
        "--tool",
        "stat",
        "--role",
        "review",
        "--revoke",
    )
    assert Grant.objects.filter(revoked_at__isnull=True).count() == 1
    assert AuditEvent.objects.filter(actor_label="cli", action="grant.revoked").exists()


def test_it_refuses_unknown_names_and_bad_dates():
    approved_server("files")
    _run("create_team", "alpha")

    for args, message in [
        (("--team", "nope", "--server", "files"), "No team"),
        (("--team", "alpha", "--server", "nope"), "No server"),
        (("--team", "alpha", "--server", "files", "--tool", "nope"), "has no tool"),
        (("--team", "alpha", "--server", "files", "--role", "nope"), "has no role"),
        (("--team", "alpha", "--server", "files", "--expires", "soon"), "ISO-8601"),
    ]:
        with pytest.raises(CommandError, match=message):
            _run("grant", *args)


def test_it_prints_a_new_agent_token_once():
    _run("create_team", "alpha")

    plain, note = _run("create_agent_token", "--team", "alpha", "--role", "review", "--name", "ci")

    identity = token_authenticate(plain)
    assert AgentToken.objects.get(pk=identity.token_id).name == "ci"
    assert "not shown again" in note
    with pytest.raises(CommandError, match="roles: implementation, operations, review"):
        _run("create_agent_token", "--team", "alpha", "--role", "boss", "--name", "x")


def test_load_demo_teams_is_idempotent_and_keeps_the_token_private(tmp_path, committed):
    approved_server("time", {"get_current_time": READ})
    approved_server("git", {"git_status": READ})
    token_file = tmp_path / "demo-agent-token"

    first, _ = _run("load_demo_teams", "--token-file", str(token_file))
    second, _ = _run("load_demo_teams", "--token-file", str(token_file))

    assert first == second == token_file.read_text().strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert Grant.objects.filter(team__slug="demo", revoked_at__isnull=True).count() == 2
    assert AgentToken.objects.filter(team__slug="demo", revoked_at__isnull=True).count() == 1


def test_load_demo_teams_replaces_a_token_that_stopped_working(tmp_path, committed):
    token_file = tmp_path / "demo-agent-token"
    with committed():
        first, _ = _run("load_demo_teams", "--token-file", str(token_file))
    token_file.write_text("trm_000000000000_" + "x" * 43)

    with committed():
        second, _ = _run("load_demo_teams", "--token-file", str(token_file))

    assert second != first
    assert AgentToken.objects.filter(team__slug="demo", revoked_at__isnull=True).count() == 1
