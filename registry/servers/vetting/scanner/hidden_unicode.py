"""Hidden Unicode: the characters a model reads and a reviewer does not see, finding them in a
string, and excerpts that spell them out."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Final

from registry.servers.vetting.scanner.findings import _SEVERITY_RANK, Severity, _Collector, _Hit
from registry.servers.vetting.scanner.limits import (
    EXCERPT_CONTEXT_CHARS,
    HIDDEN_CHARS_DETAILED,
    MAX_EXCERPT_CHARS,
    PATTERN_SCAN_HEAD_CHARS,
    PATTERN_SCAN_TAIL_CHARS,
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


def hidden_runs(text: str) -> Iterator[tuple[int, int, str]]:
    """The hidden characters of `text` as (start, end, class) runs, in order: a run of tag
    characters or of stacked variation selectors is one, any other hidden character one each.
    What is ordinary in its context (a byte-order mark at the start, a joiner inside an emoji or
    a word, one variation selector, a subdivision flag's tags) is not included. The scanner
    reports these; the pages that show descriptions mark them (`templatetags/hidden_text.py`)."""
    if text.isascii() and not _ASCII_HIDDEN.search(text):
        return
    pattern = _hidden_re()
    position = 0
    while match := pattern.search(text, position):
        index = match.start()
        ch = text[index]
        if 0xE0000 <= ord(ch) <= 0xE007F:
            run = _TAG_RUN.match(text, index)
            position = run.end() if run else index + 1
            if not _is_flag_tag_sequence(text, index, position):
                yield index, position, "tag"
        elif 0xFE00 <= ord(ch) <= 0xFE0F:
            run = _SELECTOR_RUN.match(text, index)
            position = run.end() if run else index + 1
            if position - index >= 2:  # one selector after an emoji or CJK character is ordinary
                yield index, position, "variation_selector"
        else:
            position = index + 1
            found = _hidden_class(text, index)
            if found is not None:
                yield index, position, found


def tag_text(run: str) -> str:
    """The ASCII that a run of tag characters spells (what a model reads and a person does not)."""
    return "".join(chr(ord(tag) - 0xE0000) for tag in run if 0x20 <= ord(tag) - 0xE0000 <= 0x7E)


def _scan_hidden(
    collector: _Collector, text: str, location: str, *, severity: Severity | None = None
) -> str:
    """Adds hidden-character hits for `text`; returns the ASCII spelled by tag characters."""
    counts: dict[str, int] = {}
    chars: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    decoded: list[str] = []
    examined = 0
    for index, end, cls in hidden_runs(text):
        if examined >= HIDDEN_CHARS_DETAILED:
            # Past the cap only the count matters; findall runs in C.
            rest = len(_hidden_re().findall(text, index))
            counts["other"] = counts.get("other", 0) + rest
            first.setdefault("other", index)
            break
        examined += end - index
        if cls == "tag":
            decoded.append(tag_text(text[index:end]))
        counts[cls] = counts.get(cls, 0) + end - index
        chars.setdefault(cls, [])
        if len(chars[cls]) < 8:
            chars[cls].append(text[index])
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


_WHITESPACE: Final = re.compile(r"\s+")


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


def _describe_codepoints(chars: Iterable[str], limit: int = 3) -> str:
    distinct = list(dict.fromkeys(chars))
    described = [f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip() for ch in distinct[:limit]]
    if len(distinct) > limit:
        described.append(f"{len(distinct) - limit} more")
    return ", ".join(described)
