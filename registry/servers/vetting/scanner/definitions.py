"""Walking a tool definition (name, title, description, annotations, schemas) and the checks on
names, namespaces, markup, lengths, padding and schema sizes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from registry.core.canonical import canonical_json
from registry.servers.vetting.scanner.findings import _Collector, _Hit
from registry.servers.vetting.scanner.hidden_unicode import (
    _describe_codepoints,
    _excerpt,
    _hidden_re,
    _render,
    _scan_hidden,
    _truncate,
)
from registry.servers.vetting.scanner.limits import (
    EXCERPT_CONTEXT_CHARS,
    MAX_EXCERPT_CHARS,
    MAX_NAME_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    PADDING_RUN_CHARS,
    PADDING_RUN_NEWLINES,
    PATTERN_SCAN_HEAD_CHARS,
    PATTERN_SCAN_TAIL_CHARS,
)
from registry.servers.vetting.scanner.phrases import _phrase_hits

# How catalogues namespace tool names: `<server slug>__<tool name>` (registry.catalogue.naming).
NAMESPACE_SEPARATOR: Final = "__"
# An HTML tag, end tag or comment: `<b>`, `</div>`, `<img src=...>`, `<!-- ... -->`.
# Only real HTML elements: tool docs write placeholders as `<revision>`, `<path>`, `<branch>`.
_HTML_ELEMENTS: Final = (
    "a|abbr|audio|b|base|blockquote|body|br|button|code|details|div|em|embed|font|form|h[1-6]"
    "|head|hr|html|i|iframe|img|input|label|li|link|meta|object|ol|option|p|pre|script|select"
    "|small|source|span|strong|style|sub|summary|sup|svg|table|td|textarea|th|title|tr|u|ul|video"
)
_HTML_RE: Final = re.compile(
    rf"<!--|</?(?:{_HTML_ELEMENTS})(?:\s[^<>]{{0,500}})?/?>", re.IGNORECASE
)


# --- Walking definitions -------------------------------------------------------------------------

# Keywords whose string values are schema machinery, not text meant for the model: only hidden
# characters are looked for there (a `pattern` may well mention `\.env$`).
_STRUCTURAL_KEYS: Final = frozenset(
    {
        "type",
        "format",
        "$ref",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "pattern",
        "contentEncoding",
        "contentMediaType",
        "required",
    }
)
_MAX_LOCATION_CHARS: Final = 240
_NAME_ALLOWED: Final = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_NAME_CHARS}}}")


def _walk(collector: _Collector, root: Mapping[str, Any] | list[Any], path: str) -> int:
    """Scans every key and string under `root` in document order; returns the nesting depth.

    Iterative, because a hostile schema can be nested deeper than Python's recursion limit.
    """
    max_depth = 0
    stack: list[tuple[Any, str, int, str]] = [(root, path, 1, "")]
    while stack:
        value, where, depth, parent_key = stack.pop()
        if type(value) is str:
            if parent_key in _STRUCTURAL_KEYS:
                _scan_hidden(collector, value, where)
            else:
                _scan_prose(collector, value, where)
            continue
        if type(value) is dict or isinstance(value, Mapping):
            max_depth = max(max_depth, depth)
            children: list[tuple[Any, str, int, str]] = []
            for key, child in value.items():
                key_text = key if type(key) is str else str(key)
                if key_text in _SCHEMA_KEYWORDS:
                    # A keyword is plain ASCII, so it can hold neither hidden characters nor
                    # phrases; most keys of a schema are keywords.
                    child_path = _child_path(where, f".{key_text}")
                else:
                    child_path = _child_path(where, f".{_segment(key_text)}")
                    _scan_key(collector, key_text, f"{child_path} (key)")
                children.append((child, child_path, depth + 1, key_text))
            stack.extend(reversed(children))
        elif isinstance(value, list | tuple):
            max_depth = max(max_depth, depth)
            stack.extend(
                (child, _child_path(where, f"[{index}]"), depth + 1, parent_key)
                for index, child in reversed(list(enumerate(value)))
            )
    return max_depth


def _child_path(where: str, segment: str) -> str:
    # Paths stop growing past a length, so a schema nested thousands of levels deep costs linear
    # time, not quadratic; its deeper findings share the truncated location.
    if len(where) >= _MAX_LOCATION_CHARS:
        return where if where.endswith("…") else f"{where}…"
    return where + segment


def _segment(key: str) -> str:
    if len(key) <= 60 and key.isascii() and key.isprintable():
        return key
    rendered = _render(key)
    return rendered if len(rendered) <= 60 else rendered[:59] + "…"


def _scan_name(collector: _Collector, name: Any) -> None:
    if not isinstance(name, str) or not name:
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_missing",
                "medium",
                "the tool has no name, or its name is not text",
                _render(repr(name))[:MAX_EXCERPT_CHARS],
            ),
        )
        return
    hidden_text = _scan_hidden(collector, name, "name", severity="high")
    _add_identifier_hits(collector, name, "name")
    _add_hidden_text_hits(collector, hidden_text, "name")
    # Hidden characters are reported above; here only visible non-ASCII letters and symbols count.
    foreign = [ch for ch in name if not ch.isascii() and not _hidden_re().match(ch)]
    if any(ch.isalpha() for ch in foreign) and any(ch.isascii() and ch.isalpha() for ch in name):
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_mixed_script",
                "high",
                "mixes ASCII letters with look-alike letters from other scripts "
                f"({_describe_codepoints(foreign)})",
                _mark_non_ascii(name),
            ),
        )
    elif foreign:
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_non_ascii",
                "medium",
                f"contains characters outside ASCII ({_describe_codepoints(foreign)})",
                _mark_non_ascii(name),
            ),
        )
    elif not _NAME_ALLOWED.fullmatch(_hidden_re().sub("", name)):
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_characters",
                "low",
                f"uses characters or a length ({len(name)}) outside what MCP recommends for tool "
                "names (1-128 of A-Z a-z 0-9 _ - .)",
                _truncate(_render(name)),
            ),
        )


def _split_identifier(name: str) -> str:
    # Lets the phrase rules read `ignorePreviousInstructions` and `do_not_tell_the_user`.
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)


def _mark_non_ascii(text: str) -> str:
    marked = "".join(ch if ch.isascii() else f"<U+{ord(ch):04X}>" for ch in text[:80])
    return _render(marked)[:MAX_EXCERPT_CHARS]


def _scan_key(collector: _Collector, key: str, location: str) -> None:
    hidden_text = _scan_hidden(collector, key, location)
    _add_identifier_hits(collector, key, location)
    _add_hidden_text_hits(collector, hidden_text, location)


def _add_identifier_hits(collector: _Collector, identifier: str, location: str) -> None:
    # Names are short: the excerpt is the whole name as written, not its split-up reading.
    hits = _phrase_hits(_split_identifier(identifier), key_rules_only=True)
    for hit in hits:
        collector.add(location, dataclasses.replace(hit, excerpt=_truncate(_render(identifier))))


def _scan_prose(collector: _Collector, text: str, location: str) -> None:
    hidden_text = _scan_hidden(collector, text, location)
    for hit in _phrase_hits(text):
        collector.add(location, hit)
    _add_hidden_text_hits(collector, hidden_text, location)
    _check_padding(collector, text, location)


def _check_namespace_imitation(
    collector: _Collector, name: str, server_slug: str, other_server_slugs: Iterable[str]
) -> None:
    if NAMESPACE_SEPARATOR not in name.strip("_"):
        return
    claimed = name.split(NAMESPACE_SEPARATOR, 1)[0].lower()
    others = {slug.lower() for slug in other_server_slugs}
    if claimed in others and claimed != server_slug.lower():
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_imitates_namespace",
                "high",
                f"looks like the tool of another server, {claimed!r}, as catalogues name it "
                f"({claimed}{NAMESPACE_SEPARATOR}...)",
                _truncate(name),
            ),
        )
    else:
        collector.add(
            "name",
            _Hit(
                "suspicious_name",
                "name_looks_namespaced",
                "medium",
                f"contains {NAMESPACE_SEPARATOR!r}, which catalogues put between a server and "
                "its tools' names",
                _truncate(name),
            ),
        )


def _check_markup(collector: _Collector, text: str, location: str) -> None:
    match = _HTML_RE.search(text[: PATTERN_SCAN_HEAD_CHARS + PATTERN_SCAN_TAIL_CHARS])
    if match is None:
        return
    start = max(0, match.start() - EXCERPT_CONTEXT_CHARS)
    collector.add(
        location,
        _Hit(
            "markup_in_text",
            "html",
            "medium",
            f"contains HTML ({_truncate(match.group(0))})",
            _truncate(_render(text[start : match.end() + EXCERPT_CONTEXT_CHARS])),
        ),
    )


def _add_hidden_text_hits(collector: _Collector, hidden_text: str, location: str) -> None:
    # What tag characters spell is read like any description: the model reads it as one.
    for hit in _phrase_hits(hidden_text) if hidden_text else ():
        label = f"{hit.label} (in hidden tag characters)"
        excerpt = _truncate(f"hidden: {hit.excerpt}")
        collector.add(location, dataclasses.replace(hit, label=label, excerpt=excerpt))


def _check_length(collector: _Collector, text: str, location: str, limit: int) -> None:
    if len(text) <= limit:
        return
    tail = _render(text[-60:])
    collector.add(
        location,
        _Hit(
            "oversized_description",
            "long_text",
            "medium",
            f"{len(text):,} characters (limit {limit:,})",
            _truncate(f"{_render(text[:60])} … {tail}"),
        ),
    )


def _check_padding(collector: _Collector, text: str, location: str) -> None:
    for match in _BLANK_RUN.finditer(text):
        run = match.group()
        newlines = run.count("\n")
        if len(run) >= PADDING_RUN_CHARS or newlines >= PADDING_RUN_NEWLINES:
            collector.add(
                location,
                _Hit(
                    "oversized_description",
                    "whitespace_padding",
                    "medium",
                    f"a run of {len(run):,} blank characters ({newlines:,} line breaks) pushes "
                    "the text after it out of view",
                    _excerpt(text, match.start(), match.end()),
                ),
            )
            return


def _check_schema_size(
    collector: _Collector, schema: Mapping[str, Any] | list[Any], location: str, depth: int
) -> None:
    try:
        text = canonical_json(schema)
    except (TypeError, ValueError, RecursionError):
        # Not JSON, or nested too deep to serialise: the depth check below speaks for it.
        text = ""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SCHEMA_BYTES:
        collector.add(
            location,
            _Hit(
                "oversized_schema",
                "large_schema",
                "medium",
                f"{size:,} bytes of canonical JSON (limit {MAX_SCHEMA_BYTES:,})",
                _excerpt(text, 0, 0),
            ),
        )
    if depth > MAX_SCHEMA_DEPTH:
        collector.add(
            location,
            _Hit(
                "oversized_schema",
                "deep_schema",
                "medium",
                f"nested {depth:,} levels deep (limit {MAX_SCHEMA_DEPTH})",
                _excerpt(text, 0, 0),
            ),
        )


# Schema keywords are a fixed vocabulary; only property names and other free keys are read.
_SCHEMA_KEYWORDS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$ref",
        "$defs",
        "$comment",
        "$anchor",
        "type",
        "title",
        "description",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "default",
        "examples",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "additionalProperties",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "definitions",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "uniqueItems",
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    }
)
_BLANK_RUN: Final = re.compile(rf"\s{{{PADDING_RUN_NEWLINES},}}")
