"""The demo data `make run` loads: categories and well-known servers, idempotent on every start."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command

from registry.audit.models import AuditEvent
from registry.servers import services
from registry.servers.models import (
    ApprovalState,
    Category,
    ItemReview,
    McpServer,
    ReviewStatus,
    ServerPrompt,
    Tool,
)
from registry.servers.policy import TrustTier

pytestmark = pytest.mark.django_db


def _load(*args):
    out = io.StringIO()
    call_command("load_demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _rows():
    servers = {
        s.slug: (s.name, s.trust_tier, s.review_status, s.command, s.category_id)
        for s in McpServer.objects.select_related("category")
    }
    return servers, sorted(Category.objects.values_list("slug", "name"))


def test_it_loads_the_well_known_servers_and_their_categories():
    _load()

    assert sorted(McpServer.objects.values_list("slug", flat=True)) == [
        "everything",
        "fetch",
        "filesystem",
        "git",
        "memory",
        "time",
    ]
    assert Category.objects.count() == 6


def test_it_approves_time_and_git_as_builtin_servers():
    _load()

    for slug in ("time", "git"):
        server = McpServer.objects.get(slug=slug)
        assert (server.trust_tier, server.review_status) == (
            TrustTier.BUILTIN,
            ReviewStatus.APPROVED,
        )


def test_it_leaves_the_other_servers_for_review_with_lower_tiers():
    _load()

    states = dict(
        McpServer.objects.exclude(slug__in=["time", "git"]).values_list("slug", "review_status")
    )
    assert states == {
        "fetch": ReviewStatus.PENDING_REVIEW,
        "filesystem": ReviewStatus.DRAFT,
        "memory": ReviewStatus.DRAFT,
        "everything": ReviewStatus.DRAFT,
    }
    assert McpServer.objects.get(slug="everything").trust_tier == TrustTier.UNTRUSTED
    assert McpServer.objects.get(slug="fetch").trust_tier == TrustTier.COMMUNITY


def test_it_records_the_demo_as_the_actor_of_every_decision():
    _load()

    assert set(AuditEvent.objects.values_list("actor_label", flat=True)) == {"system:demo"}
    assert AuditEvent.objects.filter(action="server.approved").count() == 2


def test_it_approves_no_tool():
    _load()

    assert not Tool.objects.filter(approval_state=ApprovalState.APPROVED).exists()


def test_approving_read_tools_approves_the_resources_and_prompts_never_reviewed():
    _load()
    time_server = McpServer.objects.get(slug="time")
    waiting = ServerPrompt(server=time_server, name="now")
    hidden = ServerPrompt(server=time_server, name="spam", review_state=ItemReview.HIDDEN)
    for item in (waiting, hidden):
        item.refresh_definition_hash()
        item.save()

    out = _load("--approve-read-tools")

    assert "time/now" in out
    assert ServerPrompt.objects.get(pk=waiting.pk).is_approved
    assert ServerPrompt.objects.get(pk=hidden.pk).review_state == ItemReview.HIDDEN


def test_it_runs_time_and_git_with_the_python_that_runs_toolroom():
    _load()

    assert McpServer.objects.get(slug="time").command == [sys.executable, "-m", "mcp_server_time"]
    assert McpServer.objects.get(slug="git").command[-2:] == [
        "--repository",
        str(settings.BASE_DIR),
    ]


@pytest.mark.processes
@pytest.mark.parametrize("slug", ["time", "git"])
def test_the_demo_command_of_a_builtin_server_starts_from_this_environment(slug):
    _load()
    argv = McpServer.objects.get(slug=slug).command

    # --help exits at once; it proves the module is importable by that interpreter.
    completed = subprocess.run(
        [argv[0], argv[1], argv[2], "--help"], capture_output=True, timeout=60, check=False
    )

    assert completed.returncode == 0, completed.stderr


def test_it_pins_the_npm_servers():
    _load()

    assert McpServer.objects.get(slug="memory").command == [
        "npx",
        "-y",
        "@modelcontextprotocol/server-memory@2026.8.31",
    ]
    assert McpServer.objects.get(slug="memory").package_version == "2026.8.31"


def test_loading_twice_leaves_the_same_rows():
    _load()
    before = _rows()

    _load()

    assert _rows() == before


def test_loading_twice_adds_nothing_to_the_audit_trail():
    _load()
    events = AuditEvent.objects.count()

    out = _load()

    assert AuditEvent.objects.count() == events
    assert "Demo data is already loaded." in out


def test_it_leaves_an_admins_decisions_alone_on_the_next_start(alice):
    _load()
    services.server_reject(
        actor=alice, server=McpServer.objects.get(slug="fetch"), reason="Not needed here"
    )
    services.server_update(
        actor=alice,
        server=McpServer.objects.get(slug="memory"),
        changes={"description": "Edited by alice"},
    )

    _load()

    assert McpServer.objects.get(slug="fetch").review_status == ReviewStatus.REJECTED
    assert McpServer.objects.get(slug="memory").description == "Edited by alice"


def test_it_brings_back_a_missing_demo_server():
    _load()
    McpServer.objects.filter(slug="time").delete()

    _load()

    assert McpServer.objects.get(slug="time").review_status == ReviewStatus.APPROVED


def test_reset_restores_the_demo_definition(alice):
    _load()
    services.server_update(
        actor=alice,
        server=McpServer.objects.get(slug="memory"),
        changes={"description": "Edited by alice"},
    )

    _load("--reset")

    assert McpServer.objects.get(slug="memory").description.startswith("A knowledge graph")
