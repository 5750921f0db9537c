"""The import_servers and export_servers management commands: thin, honest about what they do."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from registry.audit.models import AuditEvent
from registry.servers.models import McpServer
from registry.servers.policy import TrustTier

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"
GITHUB_TOKEN = "ghp_Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5eU0i"


def _run(*args, stdin=None):
    out, err = io.StringIO(), io.StringIO()
    call_command("import_servers", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_imports_a_file_and_prints_a_summary():
    out, _ = _run(str(DATA / "claude_desktop_config.json"))

    assert McpServer.objects.count() == 3
    assert "Imported: 3 created, 0 updated, 0 unchanged." in out


def test_it_prints_the_plan_and_writes_nothing_on_a_dry_run():
    out, _ = _run(str(DATA / "claude_desktop_config.json"), "--dry-run")

    assert McpServer.objects.count() == 0
    assert "+ github (github): create" in out
    assert "Servers: 3 to create, 0 to update, 0 unchanged." in out
    assert "Dry run: nothing was written." in out


def test_it_shows_field_changes_on_a_dry_run_reimport(tmp_path):
    _run(str(DATA / "claude_desktop_config.json"))
    changed = tmp_path / "claude_desktop_config.json"
    changed.write_text(
        (DATA / "claude_desktop_config.json").read_text().replace("test.db", "prod.db")
    )

    out, _ = _run(str(changed), "--dry-run")

    assert "~ sqlite (sqlite): updates existing server 'sqlite'" in out
    assert '/Users/dana/test.db"] -> [' in out
    assert "= github (github): unchanged (existing server 'github')" in out


def test_it_refuses_to_update_an_existing_server_without_update(tmp_path):
    _run(str(DATA / "claude_desktop_config.json"))
    changed = tmp_path / "claude_desktop_config.json"
    changed.write_text(
        (DATA / "claude_desktop_config.json").read_text().replace("test.db", "prod.db")
    )

    with pytest.raises(CommandError, match=r"would update existing server\(s\) 'sqlite'.*--update"):
        _run(str(changed))

    assert "test.db" in " ".join(McpServer.objects.get(slug="sqlite").command)


def test_it_updates_an_existing_server_with_update(tmp_path):
    _run(str(DATA / "claude_desktop_config.json"))
    changed = tmp_path / "claude_desktop_config.json"
    changed.write_text(
        (DATA / "claude_desktop_config.json").read_text().replace("test.db", "prod.db")
    )

    out, _ = _run(str(changed), "--update")

    assert "updates existing server 'sqlite'" in out
    assert "prod.db" in " ".join(McpServer.objects.get(slug="sqlite").command)


def test_it_needs_no_update_flag_when_existing_servers_stay_unchanged():
    _run(str(DATA / "claude_desktop_config.json"))

    out, _ = _run(str(DATA / "claude_desktop_config.json"))

    assert "Imported: 0 created, 0 updated, 3 unchanged." in out


def test_it_never_prints_a_secret_in_the_plan():
    out, err = _run(str(DATA / "claude_desktop_config.json"), "--dry-run")

    assert GITHUB_TOKEN not in out + err
    assert "GITHUB_PERSONAL_ACCESS_TOKEN=" in out


def test_it_never_prints_a_secret_when_importing():
    out, err = _run(str(DATA / "claude_desktop_config.json"))

    assert GITHUB_TOKEN not in out + err


def test_it_records_the_operating_system_user_as_the_actor():
    _run(str(DATA / "claude_desktop_config.json"))

    labels = set(AuditEvent.objects.values_list("actor_label", flat=True))
    assert len(labels) == 1
    assert labels.pop().startswith("cli:")


def test_it_vouches_for_the_tier_given_on_the_command_line():
    _run(str(DATA / "claude_desktop_config.json"), "--tier", "builtin")

    assert set(McpServer.objects.values_list("trust_tier", flat=True)) == {TrustTier.BUILTIN}


def test_it_reads_standard_input_when_the_path_is_a_dash(monkeypatch):
    content = (DATA / "cursor_mcp.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(content)))

    _run("-")

    assert McpServer.objects.filter(slug="context7").exists()


def test_it_forces_the_format_when_asked(tmp_path):
    odd_name = tmp_path / "servers.txt"
    odd_name.write_bytes((DATA / "weather.server.json").read_bytes())

    _run(str(odd_name), "--format", "server-json")

    assert McpServer.objects.filter(slug="io-github-example-weather-mcp").exists()


def test_it_exits_with_every_problem_listed_and_writes_nothing(tmp_path):
    bad = tmp_path / "mcp.json"
    bad.write_text(
        '{"mcpServers": {"ok": {"command": "uvx", "args": ["mcp-server-time"]},'
        ' "shell": {"command": "npx -y @modelcontextprotocol/server-memory"},'
        ' "local": {"type": "http", "url": "file:///etc/passwd"}}}'
    )
    err = io.StringIO()

    with pytest.raises(CommandError, match="was not imported"):
        call_command("import_servers", str(bad), stdout=io.StringIO(), stderr=err)

    assert McpServer.objects.count() == 0
    assert "shell: command: The program 'npx -y @modelcontextprotocol/server-memory'" in (
        err.getvalue()
    )
    assert "local: url: Only http:// and https:// URLs" in err.getvalue()


def test_it_refuses_a_file_over_the_size_limit_before_reading_it(tmp_path):
    big = tmp_path / "mcp.json"
    big.write_bytes(b" " * 5000 + b"{}")

    with (
        override_settings(TOOLROOM_IMPORT_MAX_BYTES=4096),
        pytest.raises(
            CommandError,
            match=r"The file is 4\.9 KB \(5,002 bytes\); imports are limited to 4\.0 KB",
        ),
    ):
        _run(str(big))


def test_it_says_when_the_file_cannot_be_read(tmp_path):
    with pytest.raises(CommandError, match="Cannot read"):
        _run(str(tmp_path / "missing.json"))
