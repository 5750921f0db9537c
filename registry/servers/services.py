"""Every state change of servers and tools: each validates, runs in a transaction, and audits.

Admin actions, the API, management commands and worker tasks all call these; none of them
changes a server's review status or a tool's approval by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import PermissionsMixin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.servers.importing.launchers import LauncherError, launcher_parse
from registry.servers.models import (
    ApprovalEndReason,
    ApprovalState,
    Category,
    McpServer,
    PermissionClass,
    ReviewStatus,
    ServerStatus,
    Tool,
    ToolApproval,
)
from registry.servers.operations.discovery import discovery_request
from registry.servers.operations.runtime import runtime_restart_if_held
from registry.servers.policy import (
    NETWORK_STRICTNESS,
    Isolation,
    NetworkMode,
    TrustTier,
    allowed_network_modes,
    is_sensitivity_decrease,
    is_trust_increase,
    tier_policy,
)
from registry.servers.signals import announce_visibility_change
from registry.servers.tool_definitions import derive_permission_class

# Fields an admin (or an import) may set on a server. Review status, runtime state and tools are
# changed only by their own services.
SERVER_EDITABLE_FIELDS = frozenset(
    {
        "slug",
        "name",
        "description",
        "category",
        "version",
        "homepage_url",
        "repository_url",
        "trust_tier",
        "transport",
        "command",
        "working_directory",
        "url",
        "env",
        "headers",
        "package_registry",
        "package_identifier",
        "package_version",
        "image",
        "data_sensitivity",
        "isolation",
        "network_mode",
        "egress_allowlist",
        "memory_limit_mb",
        "cpu_limit",
        "pids_limit",
        "health_check_method",
        "health_check_tool",
        "health_check_arguments",
        "health_check_interval_seconds",
        "health_check_timeout_seconds",
        "health_failure_threshold",
        "auto_start",
        "restart_policy",
        "restart_max_attempts",
    }
)
SECRET_FIELDS = frozenset({"env", "headers"})
# Changing what runs, or where it may reach, after approval sends the server back to review.
# Env and headers are part of what runs (LD_PRELOAD, NODE_OPTIONS, PYTHONPATH, a proxy header).
LAUNCH_FIELDS = frozenset(
    {
        "env",
        "headers",
        "transport",
        "command",
        "working_directory",
        "url",
        "package_registry",
        "package_identifier",
        "package_version",
        "image",
    }
)
REVIEWED_STATUSES = (ReviewStatus.APPROVED, ReviewStatus.SUSPENDED)
# What a running server's process or container is made from: changing it restarts a warm runtime.
RUNTIME_FIELDS = LAUNCH_FIELDS | frozenset(
    {
        "env",
        "headers",
        "isolation",
        "network_mode",
        "egress_allowlist",
        "memory_limit_mb",
        "cpu_limit",
        "pids_limit",
    }
)
# What a sandboxed server's kept egress network and proxy are made for (its key and policy).
EGRESS_FIELDS = frozenset({"slug", "isolation", "network_mode", "egress_allowlist"})
# What agents see of a server in their catalogue (the slug is part of every tool's name).
CATALOGUE_FIELDS = frozenset(
    {"slug", "name", "description", "category", "version", "homepage_url", "repository_url"}
)


# Giving a server a tier above untrusted, or letting it run as a local process, vouches for the
# code it runs on the worker host: only people with this permission may.
VOUCH_PERMISSION = "servers.vouch_trust_tier"


def actor_may_vouch(actor: Actor) -> bool:
    """People need the vouch permission; labels other than agents are operators at the
    command line or Toolroom itself (`cli`, `system`), who own the host anyway."""
    if actor is None:
        return True
    if isinstance(actor, str):
        return not actor.startswith("agent:")
    if not isinstance(actor, PermissionsMixin) or not actor.is_active:
        return False
    return actor.has_perm(VOUCH_PERMISSION)


def vouch_reasons(before: McpServer | None, after: McpServer, changed: set[str]) -> list[str]:
    """What in this create or update only someone who may vouch for trust tiers may do."""
    reasons: list[str] = []
    above_untrusted = after.trust_tier != TrustTier.UNTRUSTED
    runs_locally = after.isolation == Isolation.LOCAL
    if before is None:
        if above_untrusted:
            reasons.append(f"give a server the {after.get_trust_tier_display()} tier")
        if runs_locally:
            reasons.append("let a server run as a local process")
        return reasons
    if "trust_tier" in changed and is_trust_increase(before.trust_tier, after.trust_tier):
        reasons.append(f"raise a server's tier to {after.get_trust_tier_display()}")
    if runs_locally and before.isolation != Isolation.LOCAL:
        reasons.append("let a server run as a local process")
    elif runs_locally and changed & RUNTIME_FIELDS:
        # What a local server runs is code on the worker host: editing it is vouching for it.
        what = ", ".join(sorted(changed & RUNTIME_FIELDS))
        reasons.append(f"change what a local process server runs ({what})")
    return reasons


def _check_vouch(
    actor: Actor, before: McpServer | None, after: McpServer, changed: set[str]
) -> None:
    reasons = vouch_reasons(before, after, changed)
    if reasons and not actor_may_vouch(actor):
        raise ApplicationError(
            vouch_refusal(reasons), field="trust_tier" if "tier" in reasons[0] else "isolation"
        )


def vouch_refusal(reasons: list[str]) -> str:
    return (
        f"You may not {'; nor '.join(reasons)}: that needs the permission 'Can give imported "
        "servers a trust tier above untrusted' (servers.vouch_trust_tier). Without it, a "
        "server stays untrusted and sandboxed."
    )


def _field_value(server: McpServer, name: str) -> Any:
    if name == "category":
        return server.category.slug if server.category_id else None  # type: ignore[union-attr]
    value = getattr(server, name)
    if name in SECRET_FIELDS:
        # Audit records which secrets exist, never their values.
        return sorted((value or {}).keys())
    if hasattr(value, "as_tuple"):  # Decimal
        return str(value)
    return value


def _snapshot(server: McpServer, fields: Iterable[str]) -> dict[str, Any]:
    return {name: _field_value(server, name) for name in fields}


def _as_validation_application_error(exc: ValidationError) -> ApplicationError:
    if hasattr(exc, "error_dict"):
        first_field = next(iter(exc.message_dict))
        text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in exc.message_dict.items())
        return ApplicationError(text, field=first_field, extra={"fields": exc.message_dict})
    return ApplicationError(" ".join(exc.messages))


def _loosening_changes(before: McpServer, after: McpServer, changed: set[str]) -> list[str]:
    """The changes that make an already reviewed server run something else or reach further."""
    reasons = sorted(changed & LAUNCH_FIELDS)
    if "trust_tier" in changed and is_trust_increase(before.trust_tier, after.trust_tier):
        reasons.append("trust_tier")
    if "data_sensitivity" in changed and is_sensitivity_decrease(
        before.data_sensitivity, after.data_sensitivity
    ):
        reasons.append("data_sensitivity")
    if "isolation" in changed and after.isolation == "local":
        reasons.append("isolation")
    if "network_mode" in changed and NETWORK_STRICTNESS.index(
        after.network_mode  # type: ignore[arg-type]
    ) > NETWORK_STRICTNESS.index(before.network_mode):  # type: ignore[arg-type]
        reasons.append("network_mode")
    if "egress_allowlist" in changed and set(after.egress_allowlist) - set(before.egress_allowlist):
        reasons.append("egress_allowlist")
    return reasons


@transaction.atomic
def server_create(*, actor: Actor, **fields: Any) -> McpServer:
    unknown = set(fields) - SERVER_EDITABLE_FIELDS
    if unknown:
        raise ApplicationError(f"Unknown server fields: {', '.join(sorted(unknown))}.")
    server = McpServer(**fields)
    try:
        server.full_clean()
    except ValidationError as exc:
        raise _as_validation_application_error(exc) from exc
    _check_vouch(actor, None, server, set(fields))
    server.save()
    ServerStatus.objects.create(server=server)
    _discover_after_change(server, actor=actor, trigger="created")
    audit_record(
        actor=actor,
        action="server.created",
        target=server,
        server=server,
        summary=f"Registered {server.name} ({server.get_transport_display()}, "
        f"{server.get_trust_tier_display()} tier) as a draft.",
        after=_snapshot(server, sorted(fields)),
    )
    return server


@transaction.atomic
def server_update(*, actor: Actor, server: McpServer, changes: Mapping[str, Any]) -> McpServer:
    """Apply `changes` (field -> new value). A loosening change to a reviewed server sends it
    back to review."""
    unknown = set(changes) - SERVER_EDITABLE_FIELDS
    if unknown:
        raise ApplicationError(
            f"These server fields cannot be edited: {', '.join(sorted(unknown))}."
        )
    # of=self: PostgreSQL cannot lock the nullable side of the outer join to the category.
    locked = (
        McpServer.objects.select_for_update(of=("self",))
        .select_related("category")
        .get(pk=server.pk)
    )
    original = McpServer.objects.select_related("category").get(pk=server.pk)
    for name, value in changes.items():
        setattr(locked, name, value)
    tightened = _ratchet_network_to_sensitivity(locked, changes)
    retargeted = secrets_drop_on_retarget(original, locked, changes)
    try:
        locked.full_clean()
    except ValidationError as exc:
        raise _as_validation_application_error(exc) from exc

    changed = {
        name
        for name in {*changes, *tightened, *SECRET_FIELDS}
        if _raw(original, name) != _raw(locked, name)
    }
    if not changed:
        return locked
    _check_vouch(actor, original, locked, changed)
    update_fields = set(changed)
    loosened = (
        _loosening_changes(original, locked, changed)
        if original.review_status in REVIEWED_STATUSES
        else []
    )
    if loosened:
        locked.review_status = ReviewStatus.PENDING_REVIEW
        locked.review_note = f"Sent back to review after changes to {', '.join(loosened)}."
        update_fields |= {"review_status", "review_note"}
    locked.save(update_fields=[*update_fields, "updated_at", "isolation"])
    if "trust_tier" in changed:
        _tools_rederive_permission_class(locked)
        announce_visibility_change(server_ids=[locked.pk], reason="server.tier_changed")
    if changed & LAUNCH_FIELDS:
        _discover_after_change(locked, actor=actor, trigger="launch changed")
    if changed & EGRESS_FIELDS:
        _sandbox_egress_clean_on_commit(original.slug, locked.slug)
    if changed & RUNTIME_FIELDS:
        # A warm runtime runs the old spec: a new session (a new container, in the stricter
        # network mode where that is what changed) takes its place.
        runtime_restart_if_held(server=locked)
    audit_record(
        actor=actor,
        action="server.updated",
        target=locked,
        server=locked,
        summary=f"Changed {', '.join(sorted(changed))} of {locked.name}."
        + (
            f" Its network was tightened to {locked.network_mode} for "
            f"{locked.get_data_sensitivity_display().lower()} data."
            if tightened
            else ""
        )
        + (f" It goes back to review ({', '.join(loosened)} loosened)." if loosened else "")
        + (
            f" Its stored secrets were dropped because its {', '.join(retargeted)} changed; "
            "enter them again."
            if retargeted
            else ""
        ),
        before=_snapshot(original, sorted(changed)),
        after=_snapshot(locked, sorted(changed)),
        details={
            **({"back_to_review": loosened} if loosened else {}),
            **({"secrets_dropped_after": retargeted} if retargeted else {}),
        },
    )
    if changed & CATALOGUE_FIELDS and not loosened:
        announce_visibility_change(server_ids=[locked.pk], reason="server.updated")
    if loosened:
        announce_visibility_change(server_ids=[locked.pk], reason="server.sent_back_to_review")
        audit_record(
            actor=actor,
            action="server.sent_back_to_review",
            target=locked,
            server=locked,
            summary=f"{locked.name} needs a new review: {', '.join(loosened)} changed.",
            before={"review_status": original.review_status},
            after={"review_status": locked.review_status},
        )
    return locked


def _tools_rederive_permission_class(server: McpServer) -> None:
    """A tier change changes whether the server's own read-only hints are believed."""
    tools = list(Tool.objects.filter(server=server))
    for tool in tools:
        tool.permission_class_derived = derive_permission_class(
            tool.annotations or {}, trust_tier=server.trust_tier
        )
        tool.permission_class = tool.permission_class_override or tool.permission_class_derived
    Tool.objects.bulk_update(tools, ["permission_class_derived", "permission_class"])


def _launched_program(server: McpServer) -> tuple[Any, ...]:
    """What a stdio server runs, without the version a launcher pins: `npx -y pkg ARGS` and the
    same package stored as a reference with `npx -y pkg@1.2.3 ARGS` run the same program with
    the same arguments, so pinning (an import, `adopt_launchers`) does not point it elsewhere."""
    argv = list(server.command or [])
    try:
        launcher = launcher_parse(argv)
    except LauncherError:
        launcher = None
    if launcher is None:
        return (
            "argv",
            tuple(argv),
            server.image,
            server.package_registry,
            server.package_identifier,
        )
    # Stored references that disagree with the command are part of what runs.
    stray_package = (
        (server.package_registry, server.package_identifier)
        if server.package_identifier not in ("", launcher.identifier)
        or server.package_registry not in ("", launcher.registry)
        else ()
    )
    stray_image = (
        server.image
        if server.image and server.image.split("@")[0].rsplit(":", 1)[0] != launcher.identifier
        else ""
    )
    return (
        "launcher",
        launcher.registry,
        launcher.identifier,
        launcher.program,
        launcher.arguments,
        tuple(sorted(launcher.env)),
        stray_package,
        stray_image,
    )


def _retarget_reasons(before: McpServer, after: McpServer) -> list[str]:
    """What changed about where a server's stored secrets would be sent or who would read them."""
    reasons = [name for name in ("transport",) if getattr(before, name) != getattr(after, name)]
    if not reasons and _launched_program(before) != _launched_program(after):
        reasons += [
            name
            for name in ("command", "image", "package_registry", "package_identifier")
            if getattr(before, name) != getattr(after, name)
        ]
    if before.url != after.url and _origin(before.url) != _origin(after.url):
        reasons.append("URL host")
    return reasons


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url or "")
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def secrets_drop_on_retarget(
    before: McpServer, after: McpServer, changes: Mapping[str, Any]
) -> list[str]:
    """Pointing a server somewhere else (another URL host, command, image) must not carry its
    stored secrets along: someone who may edit a server but only sees masked values would
    otherwise send them to a host of their own or print them. Values typed anew in the same
    change are kept; every other value is emptied, its name kept so an admin sees what to enter
    again. Returns what changed (empty: nothing was dropped)."""
    reasons = _retarget_reasons(before, after)
    if not reasons:
        return []
    dropped = False
    for name in sorted(SECRET_FIELDS):
        stored: dict[str, str] = getattr(before, name) or {}
        given: dict[str, str] = changes.get(name, stored) or {}
        kept = {
            key: ("" if key in stored and stored[key] == value else value)
            for key, value in given.items()
        }
        if any(stored.get(key) and not kept[key] for key in kept):
            dropped = True
        setattr(after, name, kept)
    return reasons if dropped else []


def _ratchet_network_to_sensitivity(
    server: McpServer, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Raising the data sensitivity tightens the network at once, without a new review: the
    network mode drops to the loosest one the new sensitivity allows (secret: none,
    confidential: proxied at most). An edit that sets the network mode itself is validated as
    it is."""
    if "data_sensitivity" not in changes or "network_mode" in changes:
        return {}
    allowed = allowed_network_modes(server.trust_tier, server.data_sensitivity)
    if not allowed or server.network_mode in allowed:
        return {}
    tightened: dict[str, Any] = {"network_mode": allowed[-1]}
    if allowed[-1] != NetworkMode.PROXIED:
        tightened["egress_allowlist"] = []
    for name, value in tightened.items():
        setattr(server, name, value)
    return tightened


def _sandbox_egress_clean_on_commit(*slugs: str) -> None:
    """A server's kept proxied network (workers/adapters/sandbox/egress_pool.py) may no longer
    fit: once the change is committed, a worker removes what does not (a network a session is
    still on stays until its process drops it)."""
    servers = sorted(set(slugs))
    transaction.on_commit(
        lambda: task_queue.send_now(task_queue.SANDBOX_EGRESS_CLEAN, args=[servers], expires=3600),
        robust=True,
    )


def _discover_after_change(server: McpServer, *, actor: Actor, trigger: str) -> None:
    """What a server offers may have changed: have the workers look (after commit)."""
    discovery_request(server=server, actor=actor, trigger=trigger)


def _raw(server: McpServer, name: str) -> Any:
    if name == "category":
        return server.category_id
    return getattr(server, name)


# --- Review status -------------------------------------------------------------------------------


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


def server_reject(*, actor: Actor, server: McpServer, reason: str) -> McpServer:
    return _server_transition(actor=actor, server=server, action="reject", reason=reason)


def server_suspend(*, actor: Actor, server: McpServer, reason: str) -> McpServer:
    return _server_transition(actor=actor, server=server, action="suspend", reason=reason)


def server_retire(*, actor: Actor, server: McpServer, reason: str = "") -> McpServer:
    return _server_transition(actor=actor, server=server, action="retire", reason=reason)


# --- Tool approvals ------------------------------------------------------------------------------


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


# --- Categories ----------------------------------------------------------------------------------


def _clean_category(category: Category) -> None:
    try:
        category.full_clean()
    except ValidationError as exc:
        first, messages = next(iter(exc.message_dict.items()))
        raise ApplicationError(" ".join(messages), field=first) from exc


@transaction.atomic
def category_create(*, actor: Actor, slug: str, name: str, description: str = "") -> Category:
    category = Category(slug=slug, name=name, description=description)
    _clean_category(category)
    category.save()
    audit_record(
        actor=actor,
        action="category.created",
        target=category,
        summary=f"Created the category {name}.",
        after={"slug": slug, "name": name, "description": description},
    )
    return category


@transaction.atomic
def category_update(*, actor: Actor, category: Category, name: str, description: str) -> Category:
    before = {"name": category.name, "description": category.description}
    category.name, category.description = name, description
    _clean_category(category)
    category.save(update_fields=["name", "description"])
    # Catalogues show the category's name: the servers in it change for agents.
    announce_visibility_change(
        server_ids=list(category.servers.values_list("pk", flat=True)), reason="category.updated"
    )
    audit_record(
        actor=actor,
        action="category.updated",
        target=category,
        summary=f"Changed the category {category.slug}.",
        before=before,
        after={"name": name, "description": description},
    )
    return category
