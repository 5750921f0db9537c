"""Scans what a tool shows the model for hidden Unicode, instructions, secret requests and bloat."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from registry.core.canonical import canonical_json

FindingKind = Literal[
    "hidden_unicode",
    "instructions_to_model",
    "secret_or_file_request",
    "oversized_description",
    "oversized_schema",
    "suspicious_name",
    "markup_in_text",
]
Severity = Literal["high", "medium", "low"]

KINDS: Final[tuple[str, ...]] = get_args(FindingKind)
SEVERITIES: Final[tuple[str, ...]] = get_args(Severity)

# A description longer than this is flagged: reviewers stop reading long before it ends, and it is
# sent with every request. Server instructions and prompt texts get the same limit by default.
MAX_DESCRIPTION_CHARS: Final = 4_000
# Canonical JSON (UTF-8 bytes) of an input or output schema above this is flagged.
MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_SCHEMA_DEPTH: Final = 32
# The MCP specification recommends 1-128 characters from A-Z a-z 0-9 _ - . for tool names.
MAX_NAME_CHARS: Final = 128
# Blank runs this long push what follows out of a reviewer's view (a known poisoning trick).
PADDING_RUN_CHARS: Final = 200
PADDING_RUN_NEWLINES: Final = 20
# The phrase rules read at most head + tail characters of one string; hidden characters and
# sizes are still counted over the whole string. The tail is kept because payloads hide at the
# end of padded text.
PATTERN_SCAN_HEAD_CHARS: Final = 24_576
PATTERN_SCAN_TAIL_CHARS: Final = 8_192
# Beyond this many hidden characters in one string only the total is counted, not their classes.
HIDDEN_CHARS_DETAILED: Final = 10_000
EXCERPT_CONTEXT_CHARS: Final = 40
MAX_EXCERPT_CHARS: Final = 160

_SEVERITY_RANK: Final[dict[str, int]] = {"high": 0, "medium": 1, "low": 2}
# A message names at most this many distinct things found at one place, and a rule builds
# excerpts for at most this many matches in one string (the rest are only counted).
_LABELS_SHOWN: Final = 6
_MATCHES_DETAILED: Final = 20

_WHY: Final[dict[str, str]] = {
    "hidden_unicode": (
        "The model reads these characters but reviewers and most clients do not show them, so "
        "text can be smuggled past review."
    ),
    "instructions_to_model": (
        "Tool metadata that gives the model orders can steer the agent without the user seeing "
        "it (tool poisoning)."
    ),
    "secret_or_file_request": (
        "A tool that asks the model to read keys, credentials or private files and pass them on "
        "can exfiltrate them through its arguments."
    ),
    "oversized_description": (
        "Very long or padded text hides content below what a reviewer reads and costs context "
        "on every request."
    ),
    "oversized_schema": (
        "A huge or deeply nested schema costs context on every request and is hard to review."
    ),
    "suspicious_name": "A look-alike or unusual name can impersonate or shadow another tool.",
    "markup_in_text": (
        "HTML in text the model reads can hide content from reviewers (comments, hidden "
        "elements) or render as links and images in clients that show it."
    ),
}

_LEADS: Final[dict[str, str]] = {
    "hidden_unicode": "Hidden Unicode",
    "instructions_to_model": "Text aimed at the model rather than describing the tool",
    "secret_or_file_request": "Asks for secrets or sensitive files",
    "oversized_description": "Oversized text",
    "oversized_schema": "Oversized schema",
    "suspicious_name": "Suspicious name",
    "markup_in_text": "HTML markup",
}

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


@dataclass(frozen=True)
class Finding:
    """One thing an admin should look at before approving a tool."""

    kind: FindingKind
    severity: Severity
    location: str
    message: str
    excerpt: str
    count: int = 1
    rules: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "location": self.location,
            "message": self.message,
            "excerpt": self.excerpt,
            "count": self.count,
            "rules": list(self.rules),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        kind, severity = data["kind"], data["severity"]
        if kind not in KINDS or severity not in SEVERITIES:
            raise ValueError(f"Not a scanner finding: kind={kind!r} severity={severity!r}")
        return cls(
            kind=kind,
            severity=severity,
            location=str(data["location"]),
            message=str(data["message"]),
            excerpt=str(data.get("excerpt", "")),
            count=int(data.get("count", 1)),
            rules=tuple(str(rule) for rule in data.get("rules", ())),
        )


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


# --- Collecting ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    kind: FindingKind
    rule: str
    severity: Severity
    label: str
    excerpt: str
    count: int = 1


@dataclass
class _Group:
    kind: FindingKind
    location: str
    order: int
    severity: Severity
    excerpt: str
    count: int = 0
    rules: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    more_labels: int = 0


class _Collector:
    """Merges hits into one finding per (kind, location), keeping the first place they were seen."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}

    def add(self, location: str, hit: _Hit) -> None:
        key = (hit.kind, location)
        group = self._groups.get(key)
        if group is None:
            group = _Group(hit.kind, location, len(self._groups), hit.severity, hit.excerpt)
            self._groups[key] = group
        elif _SEVERITY_RANK[hit.severity] < _SEVERITY_RANK[group.severity]:
            # The excerpt shows the worst thing found at this place.
            group.severity, group.excerpt = hit.severity, hit.excerpt
        group.count += hit.count
        if hit.rule not in group.rules:
            group.rules.append(hit.rule)
        if hit.label not in group.labels:
            if len(group.labels) < _LABELS_SHOWN:
                group.labels.append(hit.label)
            else:
                group.more_labels += 1

    def findings(self) -> list[Finding]:
        groups = sorted(self._groups.values(), key=lambda g: (_SEVERITY_RANK[g.severity], g.order))
        return [self._finding(group) for group in groups]

    @staticmethod
    def _finding(group: _Group) -> Finding:
        labels = "; ".join(group.labels)
        if group.more_labels:
            labels += "; and others"
        if group.kind in ("instructions_to_model", "secret_or_file_request") and group.count > 1:
            labels += f" ({group.count} matches)"
        message = f"{_LEADS[group.kind]}: {labels}. {_WHY[group.kind]}"
        return Finding(
            kind=group.kind,
            severity=group.severity,
            location=group.location,
            message=message,
            excerpt=group.excerpt,
            count=group.count,
            rules=tuple(group.rules),
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


def _describe_codepoints(chars: Iterable[str], limit: int = 3) -> str:
    distinct = list(dict.fromkeys(chars))
    described = [f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip() for ch in distinct[:limit]]
    if len(distinct) > limit:
        described.append(f"{len(distinct) - limit} more")
    return ", ".join(described)


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


# --- Hidden Unicode ------------------------------------------------------------------------------

# class -> (one, many, severity)
_HIDDEN_CLASSES: Final[dict[str, tuple[str, str, Severity]]] = {
    "tag": ("tag character", "tag characters", "high"),
    "bidi_control": (
        "bidirectional embedding/override/isolate control",
        "bidirectional embedding/override/isolate controls",
        "high",
    ),
    "escape": ("terminal escape character", "terminal escape characters", "high"),
    "bidi_mark": ("bidirectional mark", "bidirectional marks", "medium"),
    "zero_width": ("zero-width character", "zero-width characters", "medium"),
    "control": ("control character", "control characters", "medium"),
    "variation_selector": ("stacked variation selector", "stacked variation selectors", "medium"),
    "filler": ("invisible filler letter", "invisible filler letters", "medium"),
    "surrogate": ("unpaired surrogate", "unpaired surrogates", "medium"),
    "format": ("invisible format character", "invisible format characters", "medium"),
    "soft_hyphen": ("soft hyphen", "soft hyphens", "low"),
    "other": ("further hidden character", "further hidden characters", "medium"),
}
_ZERO_WIDTH: Final = frozenset("\u200b\u200c\u200d\u2060\ufeff\u180e")
_BIDI_CONTROLS: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_BIDI_MARKS: Final = frozenset("\u200e\u200f\u061c")
_FILLERS: Final = "\u115f\u1160\u3164\uffa0"
_TAG_RUN: Final = re.compile("[\U000e0000-\U000e007f]+")
_SELECTOR_RUN: Final = re.compile("[\ufe00-\ufe0f]+")
_ASCII_HIDDEN: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@functools.cache
def _hidden_re() -> re.Pattern[str]:
    """One character class for every hidden character, built on first use.

    Listing the format characters (category Cf) walks the whole code space, about 60 ms.
    """
    ranges: list[tuple[int, int]] = [
        (0x00, 0x08),
        (0x0B, 0x0C),
        (0x0E, 0x1F),
        (0x7F, 0x9F),
        (0xD800, 0xDFFF),
        (0xE0000, 0xE007F),
        (0xE0100, 0xE01EF),
        (0xFE00, 0xFE0F),
    ]
    ranges.extend((ord(ch), ord(ch)) for ch in _FILLERS)
    start = previous = -2
    for codepoint in range(sys.maxunicode + 1):
        if unicodedata.category(chr(codepoint)) == "Cf":
            if codepoint != previous + 1:
                if start >= 0:
                    ranges.append((start, previous))
                start = codepoint
            previous = codepoint
    ranges.append((start, previous))
    body = "".join(
        re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}"
        for low, high in sorted(ranges)
    )
    return re.compile(f"[{body}]")


def _hidden_class(text: str, index: int) -> str | None:
    """Class of the hidden character at `index`, or None where it is ordinary in context."""
    ch = text[index]
    codepoint = ord(ch)
    if ch in _ZERO_WIDTH:
        if ch == "\ufeff" and index == 0:
            return None  # a byte-order mark at the start is a file-encoding artefact
        if ch in "\u200c\u200d" and _joins_visible(text, index):
            return None  # joiners inside emoji sequences and in Persian or Indic words
        return "zero_width"
    if ch in _BIDI_CONTROLS:
        return "bidi_control"
    if ch in _BIDI_MARKS:
        return "bidi_mark"
    if ch == "\x1b":
        return "escape"
    if codepoint < 0x20 or 0x7F <= codepoint <= 0x9F:
        return "control"
    if 0xD800 <= codepoint <= 0xDFFF:
        return "surrogate"
    if 0xE0100 <= codepoint <= 0xE01EF:
        return "variation_selector"
    if ch in _FILLERS:
        return "filler"
    if ch == "\u00ad":
        return "soft_hyphen"
    return "format"


def _joins_visible(text: str, index: int) -> bool:
    if index == 0 or index + 1 >= len(text):
        return False
    before, after = text[index - 1], text[index + 1]
    if before.isascii() or after.isascii():
        return False
    visible = ("L", "M", "S")
    return (
        unicodedata.category(before)[0] in visible or before == "\ufe0f"
    ) and unicodedata.category(after)[0] in visible


def _is_flag_tag_sequence(text: str, start: int, end: int) -> bool:
    # Subdivision flags (England, Scotland, Wales) are U+1F3F4, tag letters, then CANCEL TAG.
    if start == 0 or text[start - 1] != "\U0001f3f4" or text[end - 1] != "\U000e007f":
        return False
    inner = text[start : end - 1]
    return 0 < len(inner) <= 8 and all(
        "a" <= chr(ord(ch) - 0xE0000) <= "z" or "0" <= chr(ord(ch) - 0xE0000) <= "9" for ch in inner
    )


def _scan_hidden(
    collector: _Collector, text: str, location: str, *, severity: Severity | None = None
) -> str:
    """Adds hidden-character hits for `text`; returns the ASCII spelled by tag characters."""
    if text.isascii() and not _ASCII_HIDDEN.search(text):
        return ""
    pattern = _hidden_re()
    counts: dict[str, int] = {}
    chars: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    decoded: list[str] = []
    examined = 0
    position = 0
    while match := pattern.search(text, position):
        index = match.start()
        if examined >= HIDDEN_CHARS_DETAILED:
            # Past the cap only the count matters; findall runs in C.
            rest = len(pattern.findall(text, index))
            counts["other"] = counts.get("other", 0) + rest
            first.setdefault("other", index)
            break
        ch = text[index]
        if 0xE0000 <= ord(ch) <= 0xE007F:
            run = _TAG_RUN.match(text, index)
            end = run.end() if run else index + 1
            position = end
            examined += end - index
            if _is_flag_tag_sequence(text, index, end):
                continue
            cls, length = "tag", end - index
            decoded.append(
                "".join(
                    chr(ord(tag) - 0xE0000)
                    for tag in text[index:end]
                    if 0x20 <= ord(tag) - 0xE0000 <= 0x7E
                )
            )
        elif 0xFE00 <= ord(ch) <= 0xFE0F:
            run = _SELECTOR_RUN.match(text, index)
            end = run.end() if run else index + 1
            position = end
            examined += end - index
            if end - index < 2:
                continue  # one selector after an emoji or CJK character is ordinary text
            cls, length = "variation_selector", end - index
        else:
            position = index + 1
            examined += 1
            found = _hidden_class(text, index)
            if found is None:
                continue
            cls, length = found, 1
        counts[cls] = counts.get(cls, 0) + length
        chars.setdefault(cls, [])
        if len(chars[cls]) < 8:
            chars[cls].append(ch)
        first.setdefault(cls, index)
    hidden_text = " ".join(part for part in decoded if part)
    for cls in sorted(counts, key=lambda c: _SEVERITY_RANK[_HIDDEN_CLASSES[c][2]]):
        one, many, class_severity = _HIDDEN_CLASSES[cls]
        label = f"{counts[cls]:,} {one if counts[cls] == 1 else many}"
        if cls == "tag":
            label += f", hidden text: {_truncate(hidden_text, 120)!r}"
        elif cls == "other":
            label += " (not classified)"
        else:
            label += f" ({_describe_codepoints(chars[cls])})"
        index = first[cls]
        collector.add(
            location,
            _Hit(
                "hidden_unicode",
                f"hidden_{cls}",
                severity or class_severity,
                label,
                _excerpt(text, index, index + 1),
                counts[cls],
            ),
        )
    return hidden_text[: PATTERN_SCAN_HEAD_CHARS + PATTERN_SCAN_TAIL_CHARS]


# --- Phrases aimed at the model, and requests for secrets ----------------------------------------


@dataclass(frozen=True)
class _Rule:
    id: str
    kind: FindingKind
    severity: Severity
    label: str  # may name the matched `target` group as {target}
    regex: re.Pattern[str]
    # Cheap preconditions, so most strings never reach the regex: it cannot match unless one of
    # `words` (a token of the lowered text) or `needles` (a substring) occurs, and, if `requires`
    # is given, one of those substrings too.
    words: frozenset[str]
    needles: tuple[str, ...]
    requires: tuple[str, ...]
    on_words: bool  # match against the text with Markdown emphasis and underscores taken out
    in_keys: bool  # also applies to property names and tool names


def _gap(limit: int) -> str:
    # Up to `limit` characters within one clause. A dot before a non-space (".ssh", "mcp.json",
    # a URL) does not end it. Bounded and lazy, so a failed match costs at most `limit` steps.
    return rf"(?:[^.!?;\n]|[.!?;](?=\S)){{0,{limit}}}?"


_ENDINGS: Final = ("", "s", "ed", "ing")


def _forms(verbs: str) -> str:
    # The inflected words a `verb(?:s|ed|ing)?` pattern can match, for a rule's `words` gate.
    return "|".join(f"{verb}{ending}" for verb in verbs.split("|") for ending in _ENDINGS)


def _rule(
    id: str,
    kind: FindingKind,
    severity: Severity,
    label: str,
    pattern: str,
    *,
    words: str = "",
    needles: tuple[str, ...] = (),
    requires: tuple[str, ...] = (),
    on_words: bool = True,
    in_keys: bool = False,
) -> _Rule:
    return _Rule(
        id,
        kind,
        severity,
        label,
        re.compile(pattern, re.IGNORECASE),
        frozenset(words.split("|")) - {""},
        needles,
        requires,
        on_words,
        in_keys,
    )


_NEGATION: Final = r"(?:do\snot|don'?t|dont|never|must\snot|mustn'?t|should\snot|shouldn'?t)"
_PEOPLE_WORDS: Final = "user|users|human|humans|operator|operators"
_PEOPLE: Final = r"(?:the\s)?(?:users?|humans?|operators?)"

_SENSITIVE_PATH: Final = (
    r"(?P<target>~?/?\.ssh(?!\w)(?:/[\w.-]{1,64})?"
    r"|\bid_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?\b"
    r"|\bauthorized_keys\b"
    r"|~?/?\.(?:npmrc|pypirc|netrc|pgpass|git-credentials|bash_history|zsh_history)\b"
    r"|~?/?\.aws/(?:credentials|config)\b"
    r"|~?/?\.kube/config\b"
    r"|~?/?\.docker/config\.json\b"
    r"|~?/?\.gnupg\b"
    r"|~?/?\.config/gcloud\b"
    r"|(?:~?/?\.cursor/)?\bmcp\.json\b"
    r"|\bclaude_desktop_config\.json\b"
    r"|/etc/(?:shadow|sudoers|passwd)\b"
    r"|\bwallet\.dat\b)"
)
_SENSITIVE_NEEDLES: Final = (
    ".ssh",
    "id_",
    "authorized_keys",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    "_history",
    ".aws/",
    ".kube/",
    ".docker/",
    ".gnupg",
    "gcloud",
    "mcp.json",
    "claude_desktop_config",
    "/etc/",
    "wallet.dat",
)
# .env and .env.local, not `process.env`, `.envrc` or the .env.example that lists names only.
_ENV_FILE: Final = (
    r"(?P<target>(?<![\w.$])\.env(?!\.(?:example|sample|template|dist|defaults)\b)"
    r"(?:\.[\w-]{1,20})?\b)"
)
# Imperatives only: "read ~/.ssh/id_rsa" asks the model, "reads ~/.npmrc" describes the tool (and
# is left to the low-severity mention rule).
_REQUEST_VERBS: Final = (
    "read|cat|open|include|pass|send|attach|provide|paste|upload|copy|put|insert|append|load"
    "|grab|fetch|get|access|print|output|dump|collect|extract|share|forward|post|exfiltrate|leak"
    "|steal|embed"
)
_REQUEST_VERB: Final = r"\b(?:" + _REQUEST_VERBS + r")\b"
_CREDENTIAL_NOUN: Final = (
    r"\b(?:(?:private|secret|ssh|signing|gpg|pgp)[\s_-]?keys?"
    r"|api[\s_-]?(?:keys?|secrets?|tokens?)"
    r"|(?:access|auth|authentication|bearer|refresh|session|oauth|personal[\s_-]access|github"
    r"|gitlab|slack|npm|pypi|aws)[\s_-]?tokens?"
    r"|aws[\s_-]?(?:secret|access)[\s_-]?(?:access[\s_-])?keys?"
    r"|pass(?:words?|phrases?|wd)|credentials?|secrets?"
    r"|(?:session|auth)[\s_-]?cookies?|cookies"
    r"|(?:seed|recovery|mnemonic)[\s_-]?phrases?"
    r"|connection[\s_-]strings?|keychain)\b"
)
_CREDENTIAL_NEEDLES: Final = (
    "key",
    "token",
    "pass",
    "credential",
    "secret",
    "cookie",
    "phrase",
    "connection",
    "environment",
    "env",
    "keychain",
)
_ASKING_VERBS: Final = (
    "read|cat|dump|leak|extract|exfiltrate|steal|collect|harvest|gather|print|reveal|forward"
    "|send|upload|post|attach|paste|copy|output|echo|disclose|share|transmit|email|include|pass"
    "|provide|supply|give|insert|put|append|fetch|retrieve|grab|obtain|find|fill"
    "|populate|look"
)
# "look" stands for "look up"; "e-mail" is read as "mail".
_ASKING_VERB: Final = r"\b(?:" + _ASKING_VERBS + r"|mail)(?:s|ed|ing)?\b(?:\sup\b)?"
_OWNER: Final = (
    r"(?:your|the\suser'?s|users'?|user'?s|all|every|their|stored|saved|local|cached|my"
    r"|the\shost'?s|the\smachine'?s|the\ssystem'?s)"
)
_EXFIL_VERBS: Final = (
    "send|forward|post|upload|transmit|exfiltrate|leak|copy|bcc|cc|share|submit|mail|email"
    "|beacon|curl|wget"
)

_RULES: Final[tuple[_Rule, ...]] = (
    _rule(
        "ignore_instructions",
        "instructions_to_model",
        "high",
        "tells the model to ignore its instructions",
        r"\b(?:ignore|disregard|forget|override|bypass)\b"
        + _gap(15)
        + r"\b(?:previous|prior|preceding|above|earlier|former|original|system|your)\b"
        + _gap(20)
        + r"\b(?:instructions?|prompts?|directions|directives|guidelines|guardrails|rules"
        r"|policies)\b"
        r"|\b(?:ignore|disregard|forget)\s(?:everything|anything|all)\s(?:above|before"
        r"|previously|prior|else|you(?:'ve|\shave)?\s(?:were\s|been\s)?(?:told|given))",
        words="ignore|disregard|forget|override|bypass",
        in_keys=True,
    ),
    _rule(
        "model_tag",
        "instructions_to_model",
        "high",
        "an <IMPORTANT>/<SYSTEM>-style tag addressed to the model",
        r"<\s*/?\s*(?:important|system|instructions?|critical"
        r"|(?:system|ai|model|llm|assistant|agent|tool|secret|hidden|admin)[\s_-]?"
        r"(?:prompt|message|instructions?|note|directive)s?"
        r"|note[\s_-]to[\s_-](?:the[\s_-])?(?:ai|assistant|model|llm|agent))\b[^<>]{0,60}>",
        needles=("<",),
        on_words=False,
    ),
    _rule(
        "chat_template_token",
        "instructions_to_model",
        "high",
        "a chat-template control token",
        r"<\|[a-z_]{2,20}\|>|\[/?INST\]|<<\s*/?SYS\s*>>",
        needles=("<|", "[inst", "[/inst", "<<"),
        on_words=False,
    ),
    _rule(
        "bracket_directive",
        "instructions_to_model",
        "medium",
        "a bracketed [IMPORTANT]/[SYSTEM] directive",
        r"(?-i:\[\s*(?:IMPORTANT|SYSTEM|INSTRUCTIONS?|ADMIN|NOTE\sTO\s(?:THE\s)?"
        r"(?:AI|ASSISTANT|MODEL))\s*[:\]])",
        needles=("[",),
        on_words=False,
    ),
    _rule(
        "html_comment",
        "instructions_to_model",
        "medium",
        "an HTML comment, invisible when the text is rendered as Markdown",
        r"<!--\s*[^\s>]",
        needles=("<!--",),
        on_words=False,
    ),
    _rule(
        "conceal_from_user",
        "instructions_to_model",
        "high",
        "asks to keep something from the user",
        _NEGATION + r"\s(?:\w+,?\s){0,3}?(?:tell|inform|mention|reveal|disclose|notify|alert"
        r"|show|warn|explain)(?:ing)?\b" + _gap(40) + r"\b" + _PEOPLE + r"\b"
        r"|\bwithout\s(?:telling|informing|alerting|letting|(?:mentioning|revealing)(?:\sit)?"
        r"\sto)\s" + _PEOPLE + r"\b"
        r"|\b" + _PEOPLE + r"\s(?:must|should|shall|need|needs|will|may)\s?(?:not|n't|never)"
        r"\s(?:ever\s)?(?:know|see|notice|find\sout|learn|be\s(?:told|informed|aware|notified"
        r"|shown))\b"
        r"|\b(?:keep|hide|conceal)\s(?:this|it|that|these|them|the\s\w+)\s(?:\w+\s)?"
        r"(?:secret\s|hidden\s)?from\s" + _PEOPLE + r"\b",
        words=_PEOPLE_WORDS,
        in_keys=True,
    ),
    _rule(
        "stay_quiet",
        "instructions_to_model",
        "medium",
        "asks the model to keep quiet about something",
        r"\b(?:do\snot|don'?t|dont|never)\s(?:ever\s)?(?:mention|reveal|disclose|admit|say"
        r"|acknowledge)\s(?:that|this|it|anything|you|the\sfact)\b",
        words="mention|reveal|disclose|admit|say|acknowledge",
        in_keys=True,
    ),
    _rule(
        "before_using_tool",
        "instructions_to_model",
        "medium",
        "tells the model what to do before it uses the tool",
        r"\bbefore\s(?:using|calling|invoking|running|executing|you\s(?:use|call|invoke|run))"
        r"\s(?:this|the|any|these|that)\s(?:\w+\s)?(?:tools?|functions?)\b"
        + _gap(30)
        + r"\b(?:read|call|send|fetch|open|cat|load|include|pass|run|invoke|upload|collect"
        r"|gather|access|look\sup|obtain|retrieve)\b",
        words="before",
    ),
    _rule(
        "directive_to_assistant",
        "instructions_to_model",
        "medium",
        "orders the assistant to always, never or first do something",
        r"\byou\s(?:must|are\srequired\sto|are\sinstructed\sto|have\sbeen\sinstructed\sto)"
        r"\s(?:always|never|first|immediately|now|secretly|silently|quietly|ignore|instead"
        r"|also)\b"
        r"|\byou\s(?:should|need\sto|have\sto)\s(?:secretly|silently|quietly|ignore)\b"
        r"|\b(?:the\s)?(?:assistant|ai|model|llm|agent|claude|chatgpt|gpt)\s(?:must|should"
        r"|shall|needs\sto|has\sto|is\srequired\sto)\s(?:always|never|first|immediately"
        r"|secretly|silently|quietly|ignore)\b"
        r"|\b(?:always|only)\s(?:use|call|prefer|choose|invoke)\s(?:this|the\s\w+)\s"
        r"(?:tool|function)\b" + _gap(20) + r"\b(?:instead\sof|rather\sthan|over\sany"
        r"|before\sany)\b",
        words="must|required|instructed|should|need|have|shall|needs|has|always|only",
    ),
    _rule(
        "prompt_leak",
        "instructions_to_model",
        "high",
        "asks the model to disclose its prompt or conversation",
        r"\b(?:reveal|print|show|repeat|output|include|send|leak|copy|dump|disclose|share"
        r"|paste|pass|write|fill|populate|put|insert|append|attach|provide|give|supply)\b"
        + _gap(60)
        + r"\byour\s(?:\w+\s)?(?:system\s?prompt|system\smessage|instructions|initial\sprompt"
        r"|hidden\sprompt|prompt|context\swindow|conversation(?:\shistory)?|chat\shistory)\b",
        words="your",
        in_keys=True,
    ),
    _rule(
        "system_prompt",
        "instructions_to_model",
        "low",
        "refers to the model's system prompt",
        # "the/your system prompt", not a parameter titled "System Prompt" in an LLM tool.
        r"\b(?:the|your|its|my|this)\s(?:\w+\s)?system\s?(?:prompts?|messages?)\b",
        words="system|systemprompt|systemprompts|systemmessage|systemmessages",
    ),
    _rule(
        "as_an_ai",
        "instructions_to_model",
        "medium",
        "addresses the model as an AI",
        r"\bas\san?\s(?:ai|artificial\sintelligence|llm|large\slanguage\smodel|language\smodel)\b"
        r"|\byou\sare\s(?:now\s)?(?:an?\s)?(?:ai|llm|large\slanguage\smodel|language\smodel"
        r"|ai\sassistant)\b",
        words="ai|intelligence|llm|model|assistant",
    ),
    _rule(
        "exfiltration_url",
        "instructions_to_model",
        "medium",
        "asks to send data to {target}",
        r"\b(?:send|forward|post|upload|transmit|exfiltrate|leak|copy|bcc|cc|share|submit"
        r"|e-?mail|beacon|curl|wget)(?:s|ed|ing)?\b"
        + _gap(80)
        + r"\b(?:to|into|via)\s(?:\S{1,30}\s){0,2}?"
        r"(?P<target>(?:https?|ftp)://[^\s\"'<>)\]]{0,199}[^\s\"'<>)\].,;:!?]"
        r"|[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+|\d{1,3}(?:\.\d{1,3}){3})",
        words=_forms(_EXFIL_VERBS),
        on_words=False,
    ),
    _rule(
        "exfiltration_host",
        "instructions_to_model",
        "high",
        "names a known data-collection endpoint ({target})",
        r"(?P<target>\b(?:webhook\.site|requestbin\.(?:com|net)|[\w-]+\.m\.pipedream\.net"
        r"|pipedream\.net|[\w-]+\.ngrok(?:-free)?\.(?:io|app|dev)|interact\.sh"
        r"|[\w-]+\.oast\.(?:fun|pro|live|site|online|me)|burpcollaborator\.net|oastify\.com"
        r"|requestcatcher\.com|hookbin\.com|beeceptor\.com|canarytokens\.com)\b)",
        words="webhook|requestbin|pipedream|ngrok|interact|oast|burpcollaborator|oastify"
        "|requestcatcher|hookbin|beeceptor|canarytokens",
        on_words=False,
    ),
    _rule(
        "covert_copy",
        "instructions_to_model",
        "high",
        "asks to quietly copy messages or data to someone else",
        r"\b(?:always|also|secretly|silently|quietly)\s(?:\w+\s)?(?:bcc|cc|forward|send\sa\scopy)"
        r"\b",
        words="always|also|secretly|silently|quietly",
        on_words=False,
    ),
    _rule(
        "sensitive_file_request",
        "secret_or_file_request",
        "high",
        "asks to read or pass on {target}",
        _REQUEST_VERB + _gap(60) + _SENSITIVE_PATH,
        words=_REQUEST_VERBS,
        requires=_SENSITIVE_NEEDLES,
        on_words=False,
    ),
    _rule(
        "env_file_request",
        "secret_or_file_request",
        "medium",
        "asks to read or pass on {target}",
        _REQUEST_VERB + _gap(60) + _ENV_FILE,
        words=_REQUEST_VERBS,
        requires=(".env",),
        on_words=False,
    ),
    _rule(
        "secret_request",
        "secret_or_file_request",
        "medium",
        "asks for {target}",
        _ASKING_VERB
        + _gap(40)
        + r"\b"
        + _OWNER
        + r"\s(?:[\w-]+\s){0,2}?(?P<target>"
        + _CREDENTIAL_NOUN
        + r")|"
        + _ASKING_VERB
        + _gap(30)
        + r"\b(?:contents?|value|values)\sof\s(?:the\s|your\s|all\s|any\s)?(?:[\w-]+\s){0,2}?"
        r"(?P<target2>" + _CREDENTIAL_NOUN + r")"
        # Environment variables hold secrets, but tools describe showing them (a debug tool):
        # only sending them somewhere counts.
        r"|\b(?:send|forward|upload|post|include|pass|attach|paste|leak|exfiltrate|share"
        r"|transmit)\b" + _gap(40) + r"\b(?:all|every|your|the\suser'?s)\s(?:\w+\s)?"
        r"(?P<target3>environment\svariables|env\svars)\b",
        words=_forms(_ASKING_VERBS + "|mail"),
        requires=_CREDENTIAL_NEEDLES,
        on_words=False,
    ),
)
# Mentions of the most sensitive files, with no request around them, are worth a glance only.
_SENSITIVE_MENTION: Final = _rule(
    "sensitive_file_mention",
    "secret_or_file_request",
    "low",
    "mentions {target}",
    _SENSITIVE_PATH,
    needles=_SENSITIVE_NEEDLES,
    on_words=False,
)
_KEY_RULES: Final = tuple(rule for rule in _RULES if rule.in_keys)


def _union(rules: Iterable[_Rule]) -> tuple[frozenset[str], tuple[str, ...]]:
    rules = list(rules)
    words = frozenset().union(*(rule.words for rule in rules))
    needles = {needle for rule in rules for needle in rule.needles}
    # A needle that contains a shorter one adds nothing to a gate ("<|" after "<").
    needles = {n for n in needles if not any(o != n and o in n for o in needles)}
    return words, tuple(sorted(needles))


_ALL_GATE: Final = _union((*_RULES, _SENSITIVE_MENTION))
_KEY_GATE: Final = _union(_KEY_RULES)
_TOKEN: Final = re.compile(r"[a-z0-9]+")
_BLANK_RUN: Final = re.compile(rf"\s{{{PADDING_RUN_NEWLINES},}}")
_WHITESPACE: Final = re.compile(r"\s+")
# White space and Markdown emphasis, read as one space by the phrase rules: "**do not** tell",
# "do_not_tell". Single-character class, so matching it is linear.
_SEPARATORS: Final = re.compile(r"[\s*_`~#>|\\]+")
# Look-alike letters folded to ASCII before the phrase rules run, so "ignore" spelt with a
# Cyrillic i (U+0456) or in fullwidth letters (folded by NFKC) does not slip through. Matching
# only; hidden-character findings show the text as it was.
_CONFUSABLES: Final = str.maketrans(
    # Cyrillic a e o p c y x i j s d l, Greek o a e i k v p t u, curly quotes.
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u04cf"
    "\u03bf\u03b1\u03b5\u03b9\u03ba\u03bd\u03c1\u03c4\u03c5"
    "\u2018\u2019\u201c\u201d",
    "aeopcyxijsdloaeikvptu''\"\"",
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
# Phrase results depend only on the text, and tool lists repeat the same property names and
# descriptions many times; short texts are cached (bounded: at most size x length).
_CACHED_TEXT_CHARS: Final = 512


def _normalize(text: str) -> tuple[str, str]:
    """`text` as shown and as matched, head and tail only if it is long.

    Shown: hidden characters removed, white space collapsed. Matched: that, folded (NFKC,
    look-alike letters). Excerpts come from the shown text where the two line up, so an admin
    sees the letters that were actually there.
    """
    limit = PATTERN_SCAN_HEAD_CHARS + PATTERN_SCAN_TAIL_CHARS
    if len(text) > limit:
        text = f"{text[:PATTERN_SCAN_HEAD_CHARS]} … {text[-PATTERN_SCAN_TAIL_CHARS:]}"
    if text.isascii():
        if _ASCII_HIDDEN.search(text):
            text = _ASCII_HIDDEN.sub("", text)
        visible = _WHITESPACE.sub(" ", text)
        return visible, visible
    visible = _WHITESPACE.sub(" ", _hidden_re().sub("", text))
    folded = unicodedata.normalize("NFKC", visible).translate(_CONFUSABLES)
    return visible, folded


def _phrase_hits(text: str, *, key_rules_only: bool = False) -> tuple[_Hit, ...]:
    if len(text) <= _CACHED_TEXT_CHARS:
        return _cached_phrase_hits(text, key_rules_only)
    return _uncached_phrase_hits(text, key_rules_only)


@functools.lru_cache(maxsize=8192)
def _cached_phrase_hits(text: str, key_rules_only: bool) -> tuple[_Hit, ...]:
    return _uncached_phrase_hits(text, key_rules_only)


def _uncached_phrase_hits(text: str, key_rules_only: bool) -> tuple[_Hit, ...]:
    visible, plain = _normalize(text)
    lowered = plain.lower()
    gate_words, gate_needles = _KEY_GATE if key_rules_only else _ALL_GATE
    tokens = set(_TOKEN.findall(lowered))
    if gate_words.isdisjoint(tokens) and not any(needle in lowered for needle in gate_needles):
        return ()  # most strings stop here
    shown = visible if len(visible) == len(plain) else plain
    words = ""
    shifts: tuple[list[int], list[int]] = ([], [])
    hits: list[_Hit] = []
    found_request = False
    for rule in _KEY_RULES if key_rules_only else _RULES:
        if rule.words.isdisjoint(tokens) and not (
            rule.needles and any(needle in lowered for needle in rule.needles)
        ):
            continue
        if rule.requires and not any(needle in lowered for needle in rule.requires):
            continue
        if rule.on_words and not words:
            words = _SEPARATORS.sub(" ", plain)
            shifts = _separator_shifts(plain)
        subject = words if rule.on_words else plain
        found = 0
        for match in rule.regex.finditer(subject):
            found += 1
            if found > _MATCHES_DETAILED:
                continue
            start, end = match.span()
            if rule.on_words:
                start, end = _plain_offset(shifts, start), _plain_offset(shifts, end)
            hits.append(_rule_hit(rule, match, _excerpt(shown, start, end)))
        if found > _MATCHES_DETAILED:
            hits[-1] = dataclasses.replace(hits[-1], count=found - _MATCHES_DETAILED + 1)
        found_request = found_request or (found > 0 and rule.id == "sensitive_file_request")
    mention = _SENSITIVE_MENTION
    if not key_rules_only and not found_request and any(n in lowered for n in mention.needles):
        hits.extend(
            _rule_hit(mention, match, _excerpt(shown, *match.span()))
            for match in mention.regex.finditer(plain)
        )
    return tuple(hits)


def _separator_shifts(plain: str) -> tuple[list[int], list[int]]:
    """Where each separator run of `plain` starts once runs are collapsed, and the characters
    removed up to its end."""
    starts: list[int] = []
    shifts: list[int] = []
    shift = 0
    for separator in _SEPARATORS.finditer(plain):
        starts.append(separator.start() - shift)
        shift += len(separator.group()) - 1
        shifts.append(shift)
    return starts, shifts


def _plain_offset(shifts: tuple[list[int], list[int]], index: int) -> int:
    """Where `index` in the separator-collapsed text lies in the text before collapsing."""
    starts, removed = shifts
    before = bisect.bisect_left(starts, index)
    return index + (removed[before - 1] if before else 0)


def _rule_hit(rule: _Rule, match: re.Match[str], excerpt: str) -> _Hit:
    groups = match.groupdict()
    target = next((value for value in groups.values() if value), match.group())
    label = rule.label.format(target=_truncate(_render(target), 60))
    return _Hit(rule.kind, rule.id, rule.severity, label, excerpt)


# --- Excerpts ------------------------------------------------------------------------------------


def _render(text: str) -> str:
    """`text` on one line with every hidden or control character spelled out as <U+XXXX>."""
    if text.isascii():
        return (
            text
            if text.isprintable()
            else _WHITESPACE.sub(" ", _render_runs().sub(_spell_run, text))
        )
    return _WHITESPACE.sub(" ", _render_runs().sub(_spell_run, text))


@functools.cache
def _render_runs() -> re.Pattern[str]:
    return re.compile(_hidden_re().pattern + "+")


def _spell_run(match: re.Match[str]) -> str:
    run = match.group()
    spelled = "".join(f"<U+{ord(ch):04X}>" for ch in run[:3])
    if len(run) > 3:
        spelled = spelled[: -len(f"<U+{ord(run[2]):04X}>")] + f"<+{len(run) - 2} more>"
    return spelled


def _truncate(text: str, limit: int = MAX_EXCERPT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _excerpt(text: str, start: int, end: int) -> str:
    low = max(0, start - EXCERPT_CONTEXT_CHARS)
    high = min(len(text), end + EXCERPT_CONTEXT_CHARS)
    middle = text[start:end]
    if len(middle) > 80:
        middle = f"{middle[:60]}…{middle[-20:]}"
    excerpt = (
        ("…" if low > 0 else "")
        + _render(text[low:start])
        + _render(middle)
        + _render(text[end:high])
        + ("…" if high < len(text) else "")
    )
    return _truncate(excerpt.strip())
