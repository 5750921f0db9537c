"""Scans what a tool shows the model for hidden Unicode, instructions, secret requests and bloat.

The public entry points are here; `findings` (what is reported), `limits`, `hidden_unicode`,
`phrases` (the rules) and `definitions` (walking a tool definition) hold the parts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from registry.servers.vetting.scanner.definitions import (
    NAMESPACE_SEPARATOR,
    _check_length,
    _check_markup,
    _check_namespace_imitation,
    _check_schema_size,
    _scan_name,
    _scan_prose,
    _walk,
)
from registry.servers.vetting.scanner.findings import (
    KINDS,
    SEVERITIES,
    Finding,
    FindingKind,
    Severity,
    _Collector,
)
from registry.servers.vetting.scanner.limits import (
    EXCERPT_CONTEXT_CHARS,
    HIDDEN_CHARS_DETAILED,
    MAX_DESCRIPTION_CHARS,
    MAX_EXCERPT_CHARS,
    MAX_NAME_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    PADDING_RUN_CHARS,
    PADDING_RUN_NEWLINES,
    PATTERN_SCAN_HEAD_CHARS,
    PATTERN_SCAN_TAIL_CHARS,
)

__all__ = [
    "EXCERPT_CONTEXT_CHARS",
    "HIDDEN_CHARS_DETAILED",
    "KINDS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_EXCERPT_CHARS",
    "MAX_NAME_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "NAMESPACE_SEPARATOR",
    "PADDING_RUN_CHARS",
    "PADDING_RUN_NEWLINES",
    "PATTERN_SCAN_HEAD_CHARS",
    "PATTERN_SCAN_TAIL_CHARS",
    "SEVERITIES",
    "Finding",
    "FindingKind",
    "Severity",
    "scan_text",
    "scan_tool_definition",
    "tool_findings_by_name",
]


def scan_tool_definition(
    definition: Mapping[str, Any],
    *,
    server_slug: str = "",
    other_server_slugs: Iterable[str] = (),
) -> list[Finding]:
    """Findings for one tool definition in MCP wire form, worst first, one per kind and place.

    Reads what clients pass to the model: the name, title, description, annotations and every
    key and string of the input and output schemas. `_meta` and `icons` are not shown to models
    and are not read. `server_slug` and `other_server_slugs` let it see a name that imitates
    another server's namespace (`git__git_status` offered by the server `evil`).
    """
    collector = _Collector()
    _scan_name(collector, definition.get("name"))
    name = definition.get("name")
    if isinstance(name, str):
        _check_namespace_imitation(collector, name, server_slug, other_server_slugs)
    for key in ("title", "description"):
        value = definition.get(key)
        if isinstance(value, str):
            _scan_prose(collector, value, key)
            _check_markup(collector, value, key)
    description = definition.get("description")
    if isinstance(description, str):
        _check_length(collector, description, "description", MAX_DESCRIPTION_CHARS)
    annotations = definition.get("annotations")
    if isinstance(annotations, Mapping):
        _walk(collector, annotations, "annotations")
    for key in ("inputSchema", "outputSchema"):
        schema = definition.get(key)
        if isinstance(schema, Mapping | list):
            depth = _walk(collector, schema, key)
            _check_schema_size(collector, schema, key, depth)
    return collector.findings()


def scan_text(
    text: str, *, location: str, max_chars: int | None = MAX_DESCRIPTION_CHARS
) -> list[Finding]:
    """Findings for free text the model reads: server instructions, prompts, resource texts."""
    collector = _Collector()
    _scan_prose(collector, text, location)
    _check_markup(collector, text, location)
    if max_chars is not None:
        _check_length(collector, text, location, max_chars)
    return collector.findings()


def tool_findings_by_name(
    definitions: Iterable[Mapping[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """Stored findings of a tool list by tool name, as `server_tools_sync(findings=...)` takes them.

    Tools without findings are left out.
    """
    result: dict[str, list[dict[str, Any]]] = {}
    for definition in definitions:
        findings = scan_tool_definition(definition)
        if findings:
            name = definition.get("name")
            result.setdefault(str(name), []).extend(f.as_dict() for f in findings)
    return result
