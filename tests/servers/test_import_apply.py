"""Applying an import: one transaction, through the services, audited, secrets never logged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.audit.models import AuditEvent
from registry.servers import services
from registry.servers.importing import ImportFileError, ImportOptions, import_apply, import_plan
from registry.servers.models import Category, McpServer, ReviewStatus
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"
SECRETS = ("ghp_Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5eU0i", "trk_9a8b7c6d5e4f3a2b1c0d")


def _plan_file(name, **options):
    return import_plan(
        content=(DATA / name).read_bytes(), filename=name, options=ImportOptions(**options)
    )


def _plan_json(document, **options):
    return import_plan(content=json.dumps(document).encode(), options=ImportOptions(**options))


def _audit_text():
    return json.dumps(
        list(AuditEvent.objects.values("summary", "before", "after", "details", "target_repr"))
    )


def test_it_records_an_audit_event_for_every_server_it_creates_with_the_actor(alice):
    import_apply(plan=_plan_file("claude_desktop_config.json"), actor=alice)

    events = AuditEvent.objects.filter(action="server.created")
    assert sorted(e.target_repr for e in events) == ["filesystem", "github", "sqlite"]
    assert {e.actor_id for e in events} == {alice.pk}


def test_it_records_a_category_it_creates_in_the_audit_trail():
    import_apply(
        plan=_plan_file("toolroom.yaml", environ={"REPO_DIR": "/r", "TRACKER_TOKEN": "t"}),
        actor="cli:ops",
    )

    assert set(
        AuditEvent.objects.filter(action="category.created").values_list("target_repr", flat=True)
    ) == {"Developer tools", "Web"}


def test_it_never_writes_a_secret_into_the_audit_trail():
    import_apply(plan=_plan_file("claude_desktop_config.json"), actor="cli:test")
    import_apply(
        plan=_plan_file("toolroom.yaml", environ={"REPO_DIR": "/r", "TRACKER_TOKEN": SECRETS[1]}),
        actor="cli:test",
    )

    text = _audit_text()
    assert all(secret not in text for secret in SECRETS)
    assert "GITHUB_PERSONAL_ACCESS_TOKEN" in text


def test_it_never_shows_a_secret_in_the_plan():
    plan = _plan_file("claude_desktop_config.json")

    shown = repr(plan) + json.dumps(
        [[c.old, c.new] for e in plan.entries for c in e.changes]
        + [w for e in plan.entries for w in e.warnings]
    )
    assert SECRETS[0] not in shown


def test_it_sends_an_approved_server_back_to_review_when_its_command_changes(alice):
    import_apply(
        plan=_plan_file("claude_desktop_config.json", tier=TrustTier.BUILTIN), actor="cli:test"
    )
    server = McpServer.objects.get(slug="sqlite")
    services.server_submit_for_review(actor=alice, server=server)
    services.server_approve(actor=alice, server=server)
    changed = {
        "mcpServers": {
            "sqlite": {"command": "uvx", "args": ["mcp-server-sqlite", "--db-path", "/tmp/x"]}
        }
    }

    plan = _plan_json(changed)
    result = import_apply(plan=plan, actor="cli:test")

    server.refresh_from_db()
    assert server.review_status == ReviewStatus.PENDING_REVIEW
    assert result.sent_back_to_review == ["sqlite"]
    assert any("sends it back to review" in warning for warning in plan.entries[0].warnings)


def test_it_audits_only_the_fields_that_changed_on_update():
    import_apply(plan=_plan_file("claude_desktop_config.json"), actor="cli:test")
    changed = json.loads((DATA / "claude_desktop_config.json").read_text())
    changed["mcpServers"]["sqlite"]["args"][-1] = "/tmp/other.db"

    import_apply(plan=_plan_json(changed), actor="cli:test")

    [event] = AuditEvent.objects.filter(action="server.updated")
    assert event.target_repr == "sqlite"
    assert event.after is not None
    assert list(event.after) == ["command"]


def test_it_writes_nothing_when_a_server_was_added_since_the_plan():
    plan = _plan_file("claude_desktop_config.json")
    McpServerFactory(slug="sqlite")

    with pytest.raises(ImportFileError) as excinfo:
        import_apply(plan=plan, actor="cli:test")

    assert excinfo.value.problems[0].entry == "sqlite"
    assert "was added since the import was checked" in excinfo.value.problems[0].message
    assert list(McpServer.objects.values_list("slug", flat=True)) == ["sqlite"]


def test_it_writes_nothing_when_a_server_changed_since_the_plan():
    server = McpServerFactory(slug="sqlite", command=["uvx", "old"])
    plan = _plan_file("claude_desktop_config.json")
    services.server_update(actor="cli:other", server=server, changes={"description": "edited"})

    with pytest.raises(ImportFileError, match="not imported"):
        import_apply(plan=plan, actor="cli:test")

    assert McpServer.objects.count() == 1
    assert McpServer.objects.get(slug="sqlite").command == ["uvx", "old"]


def test_it_rolls_back_the_categories_when_a_server_fails():
    plan = _plan_file("toolroom.yaml", environ={"REPO_DIR": "/r", "TRACKER_TOKEN": "t"})
    McpServerFactory(slug="issues")

    with pytest.raises(ImportFileError):
        import_apply(plan=plan, actor="cli:test")

    assert Category.objects.count() == 0


def test_it_refuses_to_apply_a_dry_run_plan():
    plan = _plan_file("claude_desktop_config.json", dry_run=True)

    with pytest.raises(ValueError, match="dry-run"):
        import_apply(plan=plan, actor="cli:test")


def test_it_changes_nothing_when_the_same_file_is_imported_twice():
    import_apply(plan=_plan_file("claude_desktop_config.json"), actor="cli:test")
    events = AuditEvent.objects.count()

    result = import_apply(plan=_plan_file("claude_desktop_config.json"), actor="cli:test")

    assert result.unchanged == ["filesystem", "github", "sqlite"]
    assert AuditEvent.objects.count() == events
