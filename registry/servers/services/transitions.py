"""A server's review decisions (submit, approve, reject, suspend, retire): `TRANSITIONS` and
the services that apply them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import (
    McpServer,
    ReviewStatus,
    ServerStatus,
)
from registry.servers.policy import (
    tier_policy,
)
from registry.servers.services.servers import (
    _discover_after_change,
    _sandbox_egress_clean_on_commit,
)
from registry.servers.signals import announce_visibility_change, server_review_changed


@dataclass(frozen=True)
class Transition:
    """One review decision: from which statuses, to which, and how the admin names it."""

    action: str
    sources: tuple[ReviewStatus, ...]
    target: ReviewStatus
    verb: str
    reason_required: bool = False
    label: str = ""  # the decision's button in the admin
    takes_reason: bool = True  # submitting records no note


TRANSITIONS = {
    "submit": Transition(
        "submit",
        (ReviewStatus.DRAFT, ReviewStatus.REJECTED),
        ReviewStatus.PENDING_REVIEW,
        "submitted for review",
        label="Submit for review",
        takes_reason=False,
    ),
    "approve": Transition(
        "approve",
        (ReviewStatus.PENDING_REVIEW, ReviewStatus.SUSPENDED),
        ReviewStatus.APPROVED,
        "approved",
        label="Approve",
    ),
    "reject": Transition(
        "reject",
        (ReviewStatus.PENDING_REVIEW,),
        ReviewStatus.REJECTED,
        "rejected",
        reason_required=True,
        label="Reject",
    ),
    "suspend": Transition(
        "suspend",
        (ReviewStatus.APPROVED,),
        ReviewStatus.SUSPENDED,
        "suspended",
        reason_required=True,
        label="Suspend",
    ),
    "retire": Transition(
        "retire",
        tuple(s for s in ReviewStatus if s != ReviewStatus.RETIRED),
        ReviewStatus.RETIRED,
        "retired",
        label="Retire",
    ),
}


def server_transition_allowed(server: McpServer, action: str) -> bool:
    return server.review_status in TRANSITIONS[action].sources


@transaction.atomic
def _server_transition(
    *, actor: Actor, server: McpServer, action: str, reason: str = ""
) -> McpServer:
    transition = TRANSITIONS[action]
    locked = McpServer.objects.select_for_update().get(pk=server.pk)
    current = ReviewStatus(locked.review_status)
    if current not in transition.sources:
        allowed_from = ", ".join(s.label.lower() for s in transition.sources)
        raise ApplicationError(
            f"{locked.name} is {current.label.lower()}; only a server that is {allowed_from} "
            f"can be {transition.verb}."
        )
    reason = reason.strip()
    if transition.reason_required and not reason:
        raise ApplicationError(
            f"Give a reason why {locked.name} is {transition.verb}.", field="reason"
        )
    if action == "approve":
        _check_approval_requirements(locked, reason)
    locked.review_status = transition.target
    locked.review_note = reason
    locked.reviewed_at = timezone.now()
    locked.reviewed_by = actor if isinstance(actor, AbstractBaseUser) else None  # type: ignore[assignment]
    locked.save(
        update_fields=["review_status", "review_note", "reviewed_at", "reviewed_by", "updated_at"]
    )
    audit_record(
        actor=actor,
        action=f"server.{transition.target.value}",
        target=locked,
        server=locked,
        summary=f"{locked.name} {transition.verb}" + (f": {reason}" if reason else "."),
        before={"review_status": current.value},
        after={"review_status": transition.target.value},
        details={"reason": reason} if reason else {},
    )
    announce_visibility_change(server_ids=[locked.pk], reason=f"server.{transition.target.value}")
    server_review_changed.send(
        sender=None,
        server=locked,
        before=current.value,
        after=transition.target.value,
        reason=reason,
    )
    if transition.target == ReviewStatus.APPROVED:
        _discover_after_change(locked, actor=actor, trigger="approved")
    if transition.target == ReviewStatus.RETIRED:
        _sandbox_egress_clean_on_commit(locked.slug)
    return locked


def _check_approval_requirements(server: McpServer, note: str) -> None:
    policy = tier_policy(server.trust_tier)
    tier = server.get_trust_tier_display()
    if policy.approval_note_required and not note:
        raise ApplicationError(
            f"Approving a {tier} server needs a note saying what was reviewed.", field="reason"
        )
    if policy.vetting_report_required:
        status = ServerStatus.objects.filter(server=server).first()
        if status is None or status.last_discovered_at is None or status.last_discovery_error:
            raise ApplicationError(
                f"A {tier} server needs a vetting report from a successful discovery before it "
                "can be approved; run discovery and read the report first."
            )


def server_decide(*, actor: Actor, server: McpServer, action: str, reason: str = "") -> McpServer:
    """Apply the review decision `action` (a key of TRANSITIONS); `reason` is the approval's note
    or the reason a rejection, suspension or retirement gives."""
    if not TRANSITIONS[action].takes_reason:
        reason = ""
    return _server_transition(actor=actor, server=server, action=action, reason=reason)


def server_submit_for_review(*, actor: Actor, server: McpServer) -> McpServer:
    return _server_transition(actor=actor, server=server, action="submit")


def server_approve(*, actor: Actor, server: McpServer, note: str = "") -> McpServer:
    return _server_transition(actor=actor, server=server, action="approve", reason=note)


@transaction.atomic
def server_submit_and_approve(*, actor: Actor, server: McpServer, note: str = "") -> McpServer:
    """Approve a server, submitting it for review first if it is a draft or was rejected, in one
    transaction: an approval that is refused (a missing note, no vetting report) leaves the
    server as it was, not half-way in pending review."""
    locked = McpServer.objects.select_for_update().get(pk=server.pk)
    if locked.review_status in TRANSITIONS["submit"].sources:
        locked = server_submit_for_review(actor=actor, server=locked)
    return server_approve(actor=actor, server=locked, note=note)


def server_resume(*, actor: Actor, server: McpServer, note: str = "") -> McpServer:
    """Approve a suspended server again (and only a suspended one)."""
    if server.review_status != ReviewStatus.SUSPENDED:
        raise ApplicationError(
            f"{server.name} is {server.get_review_status_display().lower()}; only a suspended "
            "server can be resumed."
        )
    return server_approve(actor=actor, server=server, note=note)


def server_reject(*, actor: Actor, server: McpServer, reason: str) -> McpServer:
    return _server_transition(actor=actor, server=server, action="reject", reason=reason)


def server_suspend(*, actor: Actor, server: McpServer, reason: str) -> McpServer:
    return _server_transition(actor=actor, server=server, action="suspend", reason=reason)


def server_retire(*, actor: Actor, server: McpServer, reason: str = "") -> McpServer:
    return _server_transition(actor=actor, server=server, action="retire", reason=reason)
