"""The field changes an import plan shows, as display text with secrets masked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from registry.core.secret_fields import mask_secret
from registry.servers.dependency_locks import lock_summary
from registry.servers.models import McpServer

SECRET_FIELDS = ("env", "headers")


@dataclass(frozen=True)
class FieldChange:
    """One server field that an import sets: `old` and `new` are display text, secrets masked."""

    field: str
    old: str
    new: str


def display_value(value: Any, name: str = "") -> str:
    if name == "package_lock":
        return lock_summary(value or {})
    if value is None:
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def describe_secrets(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[str, str]:
    """Both sides of a change to env or headers: names, masked values, what changed."""
    before = ", ".join(f"{key}={mask_secret(old[key])}" for key in sorted(old)) or "(none)"
    parts = []
    for key in sorted(new):
        marker = "" if old.get(key) == new[key] else (" (changed)" if key in old else " (new)")
        parts.append(f"{key}={mask_secret(new[key])}{marker}")
    parts += [f"{key} (removed)" for key in sorted(set(old) - set(new))]
    return before, ", ".join(parts) or "(none)"


@cache
def _defaults() -> McpServer:
    return McpServer()


_ALWAYS_SHOWN = ("slug", "name", "transport", "trust_tier")


def creation_changes(values: dict[str, Any], category: str | None) -> list[FieldChange]:
    changes = []
    for name, value in values.items():
        if name not in _ALWAYS_SHOWN and value == getattr(_defaults(), name):
            continue
        new = (
            describe_secrets({}, value)[1] if name in SECRET_FIELDS else display_value(value, name)
        )
        changes.append(FieldChange(name, "", new))
    if category:
        changes.append(FieldChange("category", "", category))
    return _in_field_order(changes)


def update_changes(
    *,
    existing: McpServer,
    candidate: McpServer,
    values: dict[str, Any],
    category: str | None,
    category_set: bool,
) -> list[FieldChange]:
    changes = []
    for name in values:
        old, new = getattr(existing, name), getattr(candidate, name)
        if old == new:
            continue
        if name in SECRET_FIELDS:
            before, after = describe_secrets(old or {}, new or {})
        else:
            before, after = display_value(old, name), display_value(new, name)
        changes.append(FieldChange(name, before, after))
    if category_set:
        old_category = existing.category.slug if existing.category is not None else None
        if old_category != category:
            changes.append(
                FieldChange("category", display_value(old_category), display_value(category))
            )
    return _in_field_order(changes)


def _in_field_order(changes: list[FieldChange]) -> list[FieldChange]:
    order = {f.name: index for index, f in enumerate(McpServer._meta.get_fields())}
    return sorted(changes, key=lambda change: order.get(change.field, len(order)))
