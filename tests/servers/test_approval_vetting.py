"""Approving a server shows its vetting: scanner verdict, flagged tools, tier policy (issue 28)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from registry.servers.models import ServerStatus
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory, ToolFactory

pytestmark = pytest.mark.django_db

FINDING = {"kind": "instructions_to_model", "severity": "high", "location": "description"}


def _scanned(server, *, flagged: int, clean: int = 1) -> None:
    ToolFactory.create_batch(clean, server=server)
    for _ in range(flagged):
        ToolFactory(server=server, findings=[FINDING])
    ServerStatus.objects.update_or_create(
        server=server,
        defaults={"vetting_report": {"ok": True, "findings": {"tools_flagged_count": flagged}}},
    )


def test_the_approval_page_shows_the_verdict_the_flagged_count_and_the_tier_policy(client, bob):
    server = McpServerFactory(
        name="Poisoned",
        trust_tier=TrustTier.COMMUNITY,
        isolation="sandbox",
        review_status="pending_review",
    )
    _scanned(server, flagged=2)
    client.force_login(bob)

    response = client.get(reverse("admin:servers_mcpserver_decide", args=[server.pk, "approve"]))

    (row,) = response.context["vetting"]
    assert (row.flagged, row.flagged_awaiting) == (2, 2)
    page = response.content.decode()
    assert 'id="approval-vetting"' in page
    assert "Flagged: 2 tool(s) flagged, 2 of them not approved" in page
    assert "Community tier: Published by others: always sandboxed" in page
    assert "Approving needs a written note." in page
    assert f"?server__id__exact={server.pk}&amp;review=flagged" in page


def test_the_bulk_approve_action_shows_each_servers_vetting(client, bob):
    clean = McpServerFactory(
        name="Clean", trust_tier=TrustTier.BUILTIN, review_status="pending_review"
    )
    _scanned(clean, flagged=0)
    unscanned = McpServerFactory(
        name="Unscanned",
        trust_tier=TrustTier.UNTRUSTED,
        isolation="sandbox",
        network_mode="none",
        review_status="pending_review",
    )
    poisoned = McpServerFactory(
        name="Poisoned", trust_tier=TrustTier.VERIFIED, review_status="pending_review"
    )
    _scanned(poisoned, flagged=1)
    client.force_login(bob)

    response = client.post(
        reverse("admin:servers_mcpserver_changelist"),
        {"action": "approve_selected", "_selected_action": [clean.pk, unscanned.pk, poisoned.pk]},
    )

    assert response.status_code == 200
    rows = {row.server.name: row for row in response.context["vetting"]}
    assert rows["Clean"].verdict == "No findings"
    assert rows["Clean"].needs == []
    assert rows["Unscanned"].verdict == "Not scanned yet: no successful discovery"
    assert rows["Unscanned"].needs == [
        "a written note",
        "a vetting report from a successful discovery",
    ]
    assert rows["Poisoned"].verdict == "Flagged: 1 tool(s) flagged, 1 of them not approved"
    assert rows["Poisoned"].flagged == 1
    page = response.content.decode()
    assert "Builtin tier: Installed and vouched for by the operators" in page
    assert 'name="action" value="approve_selected"' in page


def test_other_decisions_do_not_show_the_vetting_table(client, bob):
    server = McpServerFactory(review_status="pending_review")
    client.force_login(bob)
    response = client.get(reverse("admin:servers_mcpserver_decide", args=[server.pk, "reject"]))
    assert response.context["vetting"] == []
    assert 'id="decision-servers"' in response.content.decode()
