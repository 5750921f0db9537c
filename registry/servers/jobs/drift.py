"""A rug pull caught between discoveries: the tools a health check (or an upstream session) just
listed, compared with the approved definitions by hash.

A tool whose definition no longer hashes to the approved one loses its approval at once (ended
with `definition_changed`, audited, the teams' catalogue versions bumped, so every gateway refuses
it on the next call), and the server is discovered again right away, which stores the new
definition, scans it and shows the diff for review. docs/security.md states the worst case.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.canonical import definition_hash
from registry.core.errors import ApplicationError
from registry.servers.jobs.discovery import discovery_request
from registry.servers.models import (
    ApprovalEndReason,
    ApprovalState,
    McpServer,
    Tool,
    ToolApproval,
)
from registry.servers.signals import announce_visibility_change

logger = logging.getLogger(__name__)

DRIFT_TRIGGER = "definition_drift"
# Who saw a changed definition (the actor), in the audit summary's words.
SEEN_BY = {
    "worker:health": "a health check",
    "gateway:session_open": "a gateway opening its session to the server",
    "gateway:list_changed": "a gateway, told by the server that its tools changed",
    "worker:runtime:session_open": "a runtime worker opening its session to the server",
    "worker:runtime:list_changed": "a runtime worker, told by the server that its tools changed",
}


def listed_hashes(tools: list[dict[str, Any]]) -> dict[str, str]:
    """name -> definition hash of what a server listed (the hash discovery stores)."""
    return {
        str(tool["name"]): definition_hash(tool)
        for tool in tools
        if isinstance(tool, dict) and isinstance(tool.get("name"), str)
    }


def tool_definitions_drift(
    *, server_id: int, tools: list[dict[str, Any]], actor: Actor = "worker:health"
) -> list[str]:
    """Compare what the server just listed with what is stored; end the approval of every
    approved tool whose definition changed, and have the server discovered again when anything
    differs (a tool changed, added or gone). Returns the tools whose approval ended."""
    listed = listed_hashes(tools)
    now = timezone.now()
    with transaction.atomic():
        server = McpServer.objects.filter(pk=server_id).first()
        if server is None:
            return []
        stored = list(
            Tool.objects.select_for_update().filter(server_id=server_id, removed_at__isnull=True)
        )
        differs = set(listed) != {tool.name for tool in stored} or any(
            listed[tool.name] != tool.definition_hash for tool in stored if tool.name in listed
        )
        ended = [
            tool
            for tool in stored
            if tool.approval_state == ApprovalState.APPROVED
            and tool.name in listed
            and listed[tool.name] != tool.approved_definition_hash
        ]
        for tool in ended:
            tool.approval_state = ApprovalState.CHANGED
            tool.approved_definition_hash = ""
        if ended:
            Tool.objects.bulk_update(ended, ["approval_state", "approved_definition_hash"])
            ToolApproval.objects.filter(
                tool__in=[tool.pk for tool in ended], ended_at__isnull=True
            ).update(
                ended_at=now,
                ended_by_label=actor_label(actor),
                end_reason=ApprovalEndReason.DEFINITION_CHANGED,
            )
            for tool in ended:
                audit_record(
                    actor=actor,
                    action="tool.definition_changed",
                    target=tool,
                    server=server,
                    summary=f"{server.name} now lists a different definition of {tool.name} "
                    f"(seen by {SEEN_BY.get(actor_label(actor), actor_label(actor))}): its "
                    "approval was dropped until an admin "
                    "approves the new definition.",
                    before={"definition_hash": tool.definition_hash},
                    after={"definition_hash": listed[tool.name]},
                    details={"approval_dropped": True, "seen_by": actor_label(actor)},
                )
            announce_visibility_change(server_ids=[server_id], reason="tool.definition_drift")
        if differs:
            try:
                discovery_request(server=server, actor=actor, trigger=DRIFT_TRIGGER)
            except ApplicationError as exc:  # retired meanwhile: nothing to discover
                logger.info("no rediscovery of %s: %s", server.slug, exc.message)
    return [tool.name for tool in ended]
