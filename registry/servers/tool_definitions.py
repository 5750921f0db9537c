"""What a tool definition is to Toolroom: its fields, its hash, the permission class it implies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models.fields.json import KeyTextTransform, KeyTransform

from registry.core.canonical import definition_hash
from registry.servers.models import PermissionClass
from registry.servers.policy import TrustTier

# A stored tool's `execution.taskSupport`, as a query expression ("required": it may be called
# only as a task, MCP's tasks extension, which the gateway does not support yet).
TASK_SUPPORT = KeyTextTransform("taskSupport", KeyTransform("execution", "definition"))
TASK_REQUIRED_REASON = (
    'it must be called as a task (its definition\'s execution.taskSupport is "required": the '
    "MCP tasks extension), which Toolroom's gateway does not support yet"
)


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as a server declared it, in MCP's wire form (camelCase keys)."""

    definition: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.definition["name"])

    @property
    def hash(self) -> str:
        return definition_hash(self.definition)

    @property
    def title(self) -> str:
        return str(self.definition.get("title") or "")

    @property
    def description(self) -> str:
        return str(self.definition.get("description") or "")

    @property
    def input_schema(self) -> dict[str, Any]:
        return dict(self.definition.get("inputSchema") or {})

    @property
    def output_schema(self) -> dict[str, Any] | None:
        schema = self.definition.get("outputSchema")
        return dict(schema) if schema is not None else None

    @property
    def annotations(self) -> dict[str, Any]:
        return dict(self.definition.get("annotations") or {})


# Tiers whose servers' word about themselves is not taken: a "read-only" hint from them does
# not make a tool visible to read-only roles until an admin confirms it by setting the class.
SELF_DESCRIPTION_UNTRUSTED_TIERS = frozenset({TrustTier.COMMUNITY, TrustTier.UNTRUSTED})


def derive_permission_class(annotations: dict[str, Any], *, trust_tier: str) -> PermissionClass:
    """Read / write / connect from MCP's tool annotations.

    - openWorldHint true: the tool reaches systems beyond the server -> connect;
    - readOnlyHint true: it changes nothing -> read, but only for builtin and verified servers;
      community and untrusted servers get the stricter class (write) until an admin confirms;
    - otherwise -> write. Annotations are hints a server gives about itself, so a missing hint
      never makes a tool look safer than write; an admin may override the class either way.
    """
    if annotations.get("openWorldHint") is True:
        return PermissionClass.CONNECT
    if (
        annotations.get("readOnlyHint") is True
        and trust_tier not in SELF_DESCRIPTION_UNTRUSTED_TIERS
    ):
        return PermissionClass.READ
    return PermissionClass.WRITE
