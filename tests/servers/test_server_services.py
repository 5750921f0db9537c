"""Server services: transitions, tier rules, policy that only tightens, audit of every change."""

from __future__ import annotations

import pytest

from registry.audit.models import AuditEvent
from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.models import ReviewStatus, ServerStatus, Transport
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db


def _stdio(**fields):
    defaults = {
        "slug": "clock",
        "name": "Clock",
        "transport": Transport.STDIO,
        "command": ["python", "-m", "mcp_server_time"],
        "trust_tier": TrustTier.BUILTIN,
    }
    return {**defaults, **fields}


def test_it_creates_a_draft_with_its_tier_default_isolation(alice):
    server = services.server_create(actor=alice, **_stdio(trust_tier=TrustTier.VERIFIED))
    assert server.review_status == ReviewStatus.DRAFT
    assert server.isolation == "sandbox"
    assert ServerStatus.objects.filter(server=server).exists()
    assert AuditEvent.objects.filter(action="server.created", server=server).count() == 1


def test_a_verified_server_may_be_explicitly_allowed_to_run_locally(alice):
    server = services.server_create(
        actor=alice, **_stdio(trust_tier=TrustTier.VERIFIED, isolation="local")
    )
    assert server.isolation == "local"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"trust_tier": "community", "isolation": "local"}, "isolation", "never looser"),
        ({"trust_tier": "untrusted", "network_mode": "internal"}, "network_mode", "tier"),
        ({"data_sensitivity": "secret", "network_mode": "proxied"}, "network_mode", "Secret data"),
        (
            {"data_sensitivity": "confidential", "network_mode": "bridge"},
            "network_mode",
            "Confidential data",
        ),
        ({"trust_tier": "untrusted", "memory_limit_mb": 4096}, "memory_limit_mb", "512 MB"),
        ({"command": []}, "command", "needs a command"),
        ({"command": ["bash", "-c", "npx server"]}, "command", "runs a shell"),
        ({"transport": "streamable_http", "command": [], "url": ""}, "url", "endpoint URL"),
        ({"egress_allowlist": ["api.github.com:443"]}, "egress_allowlist", "proxied"),
        ({"env": {"BAD NAME": "x"}}, "env", "not a valid environment variable"),
        (
            {"package_registry": "pypi", "package_identifier": "mcp-x"},
            "package_version",
            "pinned version",
        ),
    ],
)
def test_it_refuses_bad_servers_with_a_message_on_the_field(alice, fields, field, message):
    with pytest.raises(ApplicationError) as excinfo:
        services.server_create(actor=alice, **_stdio(**fields))
    assert excinfo.value.field is not None
    assert message in " ".join(excinfo.value.extra["fields"][field])
    assert not AuditEvent.objects.exists()


def test_an_admin_may_tighten_the_policy_below_the_tier(alice):
    server = services.server_create(
        actor=alice,
        **_stdio(isolation="sandbox", network_mode="none", memory_limit_mb=128, pids_limit=32),
    )
    assert server.effective_memory_limit_mb == 128
    assert server.effective_cpu_limit == 2  # builtin tier's maximum


def test_the_transitions_follow_the_review_workflow(alice):
    server = McpServerFactory()
    with pytest.raises(ApplicationError, match="only a server that is pending review"):
        services.server_approve(actor=alice, server=server)
    services.server_submit_for_review(actor=alice, server=server)
    services.server_reject(actor=alice, server=server, reason="no license")
    services.server_submit_for_review(actor=alice, server=server)
    services.server_approve(actor=alice, server=server)
    services.server_suspend(actor=alice, server=server, reason="incident 42")
    services.server_approve(actor=alice, server=server)
    retired = services.server_retire(actor=alice, server=server)
    assert retired.review_status == ReviewStatus.RETIRED
    with pytest.raises(ApplicationError, match="retired"):
        services.server_submit_for_review(actor=alice, server=server)


def test_approving_an_untrusted_server_needs_a_note_and_a_vetting_report(alice):
    server = McpServerFactory(
        trust_tier=TrustTier.UNTRUSTED, isolation="sandbox", review_status="pending_review"
    )
    with pytest.raises(ApplicationError, match="needs a note"):
        services.server_approve(actor=alice, server=server)
    with pytest.raises(ApplicationError, match="vetting report"):
        services.server_approve(actor=alice, server=server, note="read the source")

    from django.utils import timezone

    ServerStatus.objects.filter(server=server).update(last_discovered_at=timezone.now())
    approved = services.server_approve(actor=alice, server=server, note="read the source")
    assert approved.review_status == ReviewStatus.APPROVED


@pytest.mark.parametrize(
    ("changes", "back_to_review"),
    [
        ({"command": ["python", "-m", "evil"]}, True),
        ({"trust_tier": "builtin"}, True),
        ({"data_sensitivity": "public"}, True),
        ({"network_mode": "proxied", "egress_allowlist": ["api.github.com:443"]}, True),
        ({"data_sensitivity": "secret"}, False),
        ({"description": "better words"}, False),
        ({"env": {"TOKEN": "rotated"}}, True),  # env is part of what runs
        ({"memory_limit_mb": 256}, False),
    ],
)
def test_loosening_an_approved_server_sends_it_back_to_review(alice, changes, back_to_review):
    server = McpServerFactory(
        trust_tier=TrustTier.VERIFIED,
        isolation="sandbox",
        review_status="approved",
        data_sensitivity="internal",
    )

    updated = services.server_update(actor=alice, server=server, changes=changes)

    expected = ReviewStatus.PENDING_REVIEW if back_to_review else ReviewStatus.APPROVED
    assert updated.review_status == expected
    assert (
        AuditEvent.objects.filter(action="server.sent_back_to_review", server=server).exists()
        is back_to_review
    )


def test_an_update_that_changes_nothing_records_nothing(alice):
    server = McpServerFactory()
    services.server_update(actor=alice, server=server, changes={"name": server.name})
    assert not AuditEvent.objects.exists()


def test_an_invalid_update_writes_nothing(alice):
    server = McpServerFactory(name="Before")
    with pytest.raises(ApplicationError):
        services.server_update(
            actor=alice, server=server, changes={"name": "After", "command": ["a b"]}
        )
    server.refresh_from_db()
    assert server.name == "Before"


def test_review_status_cannot_be_edited_directly(alice):
    server = McpServerFactory()
    with pytest.raises(ApplicationError, match="cannot be edited"):
        services.server_update(actor=alice, server=server, changes={"review_status": "approved"})


def test_audit_events_are_append_only(alice):
    server = services.server_create(actor=alice, **_stdio())
    event = AuditEvent.objects.get(server=server)
    event.summary = "rewritten"
    with pytest.raises(RuntimeError, match="append-only"):
        event.save()
    with pytest.raises(RuntimeError, match="append-only"):
        event.delete()
