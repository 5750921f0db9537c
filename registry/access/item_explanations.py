"""What the rules that read a tool's own rows say when they explain a server's resource or prompt
(the rules themselves, and their refusals, are the tools' ones in registry/access/rules.py)."""

from __future__ import annotations

from typing import Any

from registry.access.grant_facts import iso
from registry.access.rule_types import HIDDEN, Explanation, Refusal, ToolRecord
from registry.servers.models import ItemReview, ServerPrompt, ServerResource


def _item(record: ToolRecord) -> ServerResource | ServerPrompt:
    if record.item is None:
        raise ValueError("Not the record of a resource or a prompt.")
    return record.item


def _what(record: ToolRecord) -> str:
    item = _item(record)
    if isinstance(item, ServerResource):
        return "resource template" if item.is_template else "resource"
    return "prompt"


def offered(record: ToolRecord) -> Explanation:
    """The server listed the item when discovery last ran (it is forgotten when it does not);
    a hidden item reads like one it does not list."""
    item = _item(record)
    facts: dict[str, Any] = (
        {"server_uri": item.uri} if isinstance(item, ServerResource) else {"name": item.name}
    )
    facts["hidden"] = item.review_state == HIDDEN
    if facts["hidden"]:
        return Explanation(
            f"An admin hid the {_what(record)}: it reads like one the server does not have.",
            facts,
        )
    return Explanation(f"The server offers the {_what(record)}.", facts)


def approval(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    """The item's own review: approved at a definition hash, awaiting approval, or hidden."""
    item = _item(record)
    current, approved = item.definition_hash, item.approved_definition_hash
    matches = bool(approved) and approved == current
    facts: dict[str, Any] = {
        "review_state": item.review_state,
        "current_definition_hash": current,
        "approved_definition_hash": approved or None,
        "current_definition_matches": matches,
        "reviewed_by": item.reviewed_by_label or None,
        "reviewed_at": iso(item.reviewed_at),
    }
    what = _what(record)
    if refusal is None:
        reason = f"The current definition ({current[:12]}) is the approved one."
    elif item.review_state == HIDDEN:
        reason = f"An admin hid the {what}: it reads like one the server does not have."
    elif approved and not matches:
        reason = (
            f"The definition changed since it was approved ({approved[:12]} approved, "
            f"{current[:12]} now): not the {what} that was approved."
        )
    else:
        label = ItemReview(item.review_state).label.lower()
        reason = f"The {what} is {label}: an admin approves each resource and prompt."
    return Explanation(reason, facts)


def role_class(record: ToolRecord, refusal: Refusal | None) -> Explanation:
    """Resources and prompts are read-class."""
    role = record.role
    classes = role.permission_classes
    facts = {"item_class": "read", "role_classes": classes}
    if refusal is not None:
        reason = (
            f"The role '{role.name}' allows {', '.join(classes) or 'no'} tools; resources and "
            "prompts are read-class."
        )
        return Explanation(reason, facts)
    return Explanation(f"The role '{role.name}' allows read tools (resources and prompts).", facts)


def ratchet(record: ToolRecord) -> Explanation:
    """A read is never refused by the ratchet; reading a server with private data marks the
    caller like a tool call."""
    facts = {
        "applies_to_tool": False,
        "data_sensitivity": record.server.data_sensitivity,
        "caller_checked": record.caller is not None,
        "private_data_read_from": None,
    }
    return Explanation(
        f"A {_what(record)} is read-class: the private-data ratchet never refuses it (a read of "
        "a server holding confidential data marks the caller).",
        facts,
    )
