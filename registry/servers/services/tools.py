"""Tool approvals pinned to a definition hash, their revocation, and permission-class
overrides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import (
    ApprovalEndReason,
    ApprovalState,
    PermissionClass,
    ReviewStatus,
    Tool,
    ToolApproval,
)
from registry.servers.signals import announce_visibility_change


def _end_active_approval(
    tool: Tool, *, reason: ApprovalEndReason, by: str, note: str = ""
) -> ToolApproval | None:
    approval = ToolApproval.objects.filter(tool=tool, ended_at__isnull=True).first()
    if approval is None:
        return None
    approval.ended_at = timezone.now()
    approval.ended_by_label = by
    approval.end_reason = reason
    approval.end_note = note
    approval.save(update_fields=["ended_at", "ended_by_label", "end_reason", "end_note"])
    return approval


@transaction.atomic
def tool_approve(
    *,
    actor: Actor,
    tool: Tool,
    note: str = "",
    acknowledge_findings: bool = False,
    expected_hash: str | None = None,
) -> ToolApproval:
    """Approve the tool's current definition. `expected_hash` is the hash the admin reviewed:
    if the server changed the definition since, nothing is approved."""
    locked = Tool.objects.select_for_update().select_related("server").get(pk=tool.pk)
    if locked.removed_at is not None:
        raise ApplicationError(f"{locked} is no longer offered by its server.")
    if locked.server.review_status in (ReviewStatus.RETIRED, ReviewStatus.REJECTED):
        raise ApplicationError(
            f"{locked.server.name} is {locked.server.get_review_status_display().lower()}; "
            "its tools cannot be approved."
        )
    if expected_hash is not None and expected_hash != locked.definition_hash:
        raise ApplicationError(
            f"The definition of {locked} changed while you were reviewing it; read the new "
            "definition before approving."
        )
    if locked.is_approved:
        raise ApplicationError(f"{locked} is already approved at its current definition.")
    if locked.findings and not acknowledge_findings:
        raise ApplicationError(
            f"The scanner flagged {locked} ({len(locked.findings)} finding(s)); approve it on its "
            "own page after reading them, confirming that you did.",
            field="acknowledge_findings",
        )
    label = actor_label(actor)
    _end_active_approval(locked, reason=ApprovalEndReason.DEFINITION_CHANGED, by=label)
    approval = ToolApproval.objects.create(
        tool=locked,
        definition_hash=locked.definition_hash,
        approved_by=actor if isinstance(actor, AbstractBaseUser) else None,  # type: ignore[misc]
        approver_label=label,
        note=note.strip(),
        acknowledged_findings=locked.findings if acknowledge_findings else [],
    )
    previous_state = locked.approval_state
    locked.approval_state = ApprovalState.APPROVED
    locked.approved_definition_hash = locked.definition_hash
    locked.save(update_fields=["approval_state", "approved_definition_hash"])
    audit_record(
        actor=actor,
        action="tool.approved",
        target=locked,
        server=locked.server,
        summary=f"Approved {locked} at definition {locked.definition_hash[:12]}"
        + (f": {note.strip()}" if note.strip() else "."),
        before={"approval_state": previous_state},
        after={"approval_state": locked.approval_state, "definition_hash": locked.definition_hash},
        details={"acknowledged_findings": approval.acknowledged_findings}
        if locked.findings
        else {},
    )
    announce_visibility_change(server_ids=[locked.server_id], reason="tool.approved")
    return approval


@dataclass
class BulkApprovalResult:
    approved: list[Tool] = field(default_factory=list)
    skipped: list[tuple[Tool, str]] = field(default_factory=list)


def tools_approve_bulk(
    *,
    actor: Actor,
    tools: Iterable[Tool],
    note: str = "",
    expected_hashes: Mapping[int, str] | None = None,
) -> BulkApprovalResult:
    """Approve many tools at their current hashes, or at the hashes the admin was shown
    (`expected_hashes` by tool id: a tool missing there or changed since is not approved);
    tools with scanner findings are never approved in bulk, each must be read on its own."""
    result = BulkApprovalResult()
    for tool in tools:
        if tool.findings:
            result.skipped.append((tool, "has scanner findings; approve it on its own page"))
            continue
        try:
            tool_approve(
                actor=actor,
                tool=tool,
                note=note,
                expected_hash=None if expected_hashes is None else expected_hashes.get(tool.pk, ""),
            )
        except ApplicationError as exc:
            result.skipped.append((tool, exc.message))
        else:
            result.approved.append(tool)
    return result


@transaction.atomic
def tool_revoke(*, actor: Actor, tool: Tool, reason: str) -> Tool:
    locked = Tool.objects.select_for_update().select_related("server").get(pk=tool.pk)
    reason = reason.strip()
    if not reason:
        raise ApplicationError(f"Give a reason for revoking {locked}.", field="reason")
    if locked.approval_state != ApprovalState.APPROVED:
        raise ApplicationError(f"{locked} is not approved.")
    _end_active_approval(
        locked, reason=ApprovalEndReason.REVOKED, by=actor_label(actor), note=reason
    )
    locked.approval_state = ApprovalState.REVOKED
    locked.approved_definition_hash = ""
    locked.save(update_fields=["approval_state", "approved_definition_hash"])
    audit_record(
        actor=actor,
        action="tool.revoked",
        target=locked,
        server=locked.server,
        summary=f"Revoked the approval of {locked}: {reason}",
        before={"approval_state": ApprovalState.APPROVED},
        after={"approval_state": ApprovalState.REVOKED},
        details={"reason": reason},
    )
    announce_visibility_change(server_ids=[locked.server_id], reason="tool.revoked")
    return locked


@transaction.atomic
def tool_set_permission_class(*, actor: Actor, tool: Tool, permission_class: str) -> Tool:
    """Override the permission class the annotations imply; an empty value removes the override."""
    if permission_class and permission_class not in PermissionClass.values:
        raise ApplicationError(
            f"{permission_class!r} is not a permission class "
            f"({', '.join(PermissionClass.values)}).",
            field="permission_class",
        )
    locked = Tool.objects.select_for_update().select_related("server").get(pk=tool.pk)
    before = {
        "permission_class": locked.permission_class,
        "override": locked.permission_class_override,
    }
    if locked.permission_class_override == permission_class:
        return locked
    locked.permission_class_override = permission_class
    locked.save(update_fields=["permission_class_override"])
    audit_record(
        actor=actor,
        action="tool.permission_class_set",
        target=locked,
        server=locked.server,
        summary=f"{locked} is now a {locked.permission_class} tool"
        + (" (set by an admin)." if permission_class else " (from its annotations)."),
        before=before,
        after={"permission_class": locked.permission_class, "override": permission_class},
    )
    announce_visibility_change(server_ids=[locked.server_id], reason="tool.permission_class_set")
    return locked
