"""A server's resources and prompts, reviewed one by one like tools: approve one at its current
definition hash, hide it, show it again (awaiting approval), one at a time or in bulk.

More: docs/access.md, "Resources and prompts are approved one by one"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import ItemReview, ReviewStatus, ServerPrompt, ServerResource
from registry.servers.signals import announce_visibility_change

Item = ServerResource | ServerPrompt

# What the admin's forms and the audit call each kind.
ITEM_MODELS: dict[str, type[ServerResource] | type[ServerPrompt]] = {
    "resource": ServerResource,
    "prompt": ServerPrompt,
}


def item_kind(item: Item) -> str:
    return "resource" if isinstance(item, ServerResource) else "prompt"


def _locked(item: Item) -> Item:
    model = type(item)
    return model.objects.select_for_update().select_related("server").get(pk=item.pk)


def _save_review(item: Item, *, actor: Actor, action: str, summary: str, before: str) -> None:
    item.reviewed_by_label = actor_label(actor)[:200]
    item.reviewed_at = timezone.now()
    item.save(
        update_fields=[
            "review_state",
            "approved_definition_hash",
            "reviewed_by_label",
            "reviewed_at",
        ]
    )
    kind = item_kind(item)
    audit_record(
        actor=actor,
        action=f"{kind}.{action}",
        target=item,
        server=item.server,
        summary=summary,
        before={"review_state": before},
        after={"review_state": item.review_state, "definition_hash": item.definition_hash},
    )
    announce_visibility_change(server_ids=[item.server_id], reason=f"{kind}.{action}")


@transaction.atomic
def item_approve(
    *, actor: Actor, item: Item, note: str = "", expected_hash: str | None = None
) -> Item:
    """Approve the resource or prompt at its current definition. `expected_hash` is the hash the
    admin reviewed: if the server changed the definition since, nothing is approved."""
    locked = _locked(item)
    kind = item_kind(locked)
    if locked.server.review_status in (ReviewStatus.RETIRED, ReviewStatus.REJECTED):
        raise ApplicationError(
            f"{locked.server.name} is {locked.server.get_review_status_display().lower()}; "
            f"its {kind}s cannot be approved."
        )
    if expected_hash is not None and expected_hash != locked.definition_hash:
        raise ApplicationError(
            f"The definition of the {kind} {locked} changed while you were reviewing it; read the "
            "new definition before approving."
        )
    if locked.is_approved:
        raise ApplicationError(f"The {kind} {locked} is already approved at its definition.")
    before = locked.review_state
    locked.review_state = ItemReview.APPROVED
    locked.approved_definition_hash = locked.definition_hash
    note = note.strip()
    _save_review(
        locked,
        actor=actor,
        action="approved",
        summary=f"Approved the {kind} {locked} of {locked.server.name} at definition "
        f"{locked.definition_hash[:12]}" + (f": {note}" if note else "."),
        before=before,
    )
    return locked


@transaction.atomic
def item_hide(*, actor: Actor, item: Item, reason: str = "") -> Item:
    """Hide the resource or prompt: not offered, and it reads like one the server never had,
    whatever its definition, until an admin shows it again. Its approval ends."""
    locked = _locked(item)
    kind = item_kind(locked)
    if locked.review_state == ItemReview.HIDDEN:
        raise ApplicationError(f"The {kind} {locked} is already hidden.")
    before = locked.review_state
    locked.review_state = ItemReview.HIDDEN
    locked.approved_definition_hash = ""
    reason = reason.strip()
    _save_review(
        locked,
        actor=actor,
        action="hidden",
        summary=f"Hid the {kind} {locked} of {locked.server.name}"
        + (f": {reason}" if reason else "."),
        before=before,
    )
    return locked


@transaction.atomic
def item_unhide(*, actor: Actor, item: Item) -> Item:
    """Show a hidden resource or prompt again: it awaits approval, like a new one."""
    locked = _locked(item)
    kind = item_kind(locked)
    if locked.review_state != ItemReview.HIDDEN:
        raise ApplicationError(f"The {kind} {locked} is not hidden.")
    locked.review_state = ItemReview.PENDING
    locked.approved_definition_hash = ""
    _save_review(
        locked,
        actor=actor,
        action="unhidden",
        summary=f"Showed the {kind} {locked} of {locked.server.name} again; it awaits approval.",
        before=ItemReview.HIDDEN,
    )
    return locked


@dataclass
class BulkItemResult:
    done: list[Item] = field(default_factory=list)
    skipped: list[tuple[Item, str]] = field(default_factory=list)


ITEM_ACTIONS = ("approve", "hide", "unhide")


def items_review_bulk(
    *,
    actor: Actor,
    items: Iterable[Item],
    action: str,
    note: str = "",
    expected_hashes: Mapping[str, str] | None = None,
) -> BulkItemResult:
    """Approve, hide or show again many items, each on its own (one refused is skipped with its
    reason). To approve, `expected_hashes` (by "kind:id") holds the hashes the admin was shown: an
    item missing there or changed since is not approved."""
    if action not in ITEM_ACTIONS:
        raise ApplicationError(f"{action!r} is not one of {', '.join(ITEM_ACTIONS)}.")
    result = BulkItemResult()
    for item in items:
        try:
            if action == "approve":
                key = f"{item_kind(item)}:{item.pk}"
                expected = None if expected_hashes is None else expected_hashes.get(key, "")
                item_approve(actor=actor, item=item, note=note, expected_hash=expected)
            elif action == "hide":
                item_hide(actor=actor, item=item, reason=note)
            else:
                item_unhide(actor=actor, item=item)
        except ApplicationError as exc:
            result.skipped.append((item, exc.message))
        else:
            result.done.append(item)
    return result
