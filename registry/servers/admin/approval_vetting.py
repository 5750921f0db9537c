"""What an admin reads before approving a server: the scanner's verdict, the flagged tools and the
tier's policy, for the approval confirmation page and the bulk "approve" action."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from registry.servers.models import McpServer, ServerStatus, Tool
from registry.servers.policy import TierPolicy, tier_policy
from registry.servers.selectors import tool_review_filter


@dataclass(frozen=True)
class ServerVetting:
    server: McpServer
    verdict: str  # the scanner's verdict, in words
    flagged: int  # offered tools the scanner flagged
    flagged_awaiting: int  # of them, not approved at their current definition
    instructions_flagged: bool
    policy: TierPolicy
    needs: list[str]  # what approving asks for under this tier

    @property
    def tier_label(self) -> str:
        return str(self.policy.tier.label)


def _verdict(report: dict[str, Any], flagged: int, awaiting: int, instructions: bool) -> str:
    if not report and not flagged:
        return "Not scanned yet: no successful discovery"
    if not flagged and not instructions:
        return "No findings"
    parts = []
    if flagged:
        parts.append(
            f"{flagged} tool(s) flagged"
            + (f", {awaiting} of them not approved" if awaiting else ", all approved after review")
        )
    if instructions:
        parts.append("the server's instructions are flagged")
    return "Flagged: " + "; ".join(parts)


def servers_vetting(servers: list[McpServer]) -> list[ServerVetting]:
    """One row per server, in the order given; two queries, whatever the number of servers."""
    ids = [server.pk for server in servers]
    counts = {
        row["server_id"]: row
        for row in Tool.objects.filter(server_id__in=ids, removed_at__isnull=True)
        .exclude(findings=[])
        .values("server_id")
        .annotate(
            flagged=Count("pk"), flagged_awaiting=Count("pk", filter=tool_review_filter("flagged"))
        )
    }
    reports = dict(
        ServerStatus.objects.filter(server_id__in=ids).values_list("server_id", "vetting_report")
    )
    rows = []
    for server in servers:
        report: dict[str, Any] = reports.get(server.pk) or {}
        flagged = counts.get(server.pk, {}).get("flagged", 0)
        awaiting = counts.get(server.pk, {}).get("flagged_awaiting", 0)
        instructions = bool((report.get("findings") or {}).get("instructions"))
        policy = tier_policy(server.trust_tier)
        needs = []
        if policy.approval_note_required:
            needs.append("a written note")
        if policy.vetting_report_required:
            needs.append("a vetting report from a successful discovery")
        rows.append(
            ServerVetting(
                server=server,
                verdict=_verdict(report, flagged, awaiting, instructions),
                flagged=flagged,
                flagged_awaiting=awaiting,
                instructions_flagged=instructions,
                policy=policy,
                needs=needs,
            )
        )
    return rows
