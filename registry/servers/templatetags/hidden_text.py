"""`show_hidden`: text with its hidden characters shown, marked, wherever a description is shown.

More: docs/admin.md, "Module notes".
"""

from __future__ import annotations

import unicodedata

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from registry.servers.vetting.scanner.hidden_unicode import hidden_runs, tag_text

register = template.Library()

_STYLE = "background:#ffd33d;color:#1f2328;border:1px solid #9a6700;border-radius:2px"


def _marked(run: str, kind: str) -> SafeString:
    if kind == "tag":
        return format_html(
            '<mark class="toolroom-hidden" style="{}" title="{} hidden tag character{}">'
            "⟦hidden: {}⟧</mark>",
            _STYLE,
            len(run),
            "" if len(run) == 1 else "s",
            tag_text(run),
        )
    points = " ".join(f"U+{ord(ch):04X}" for ch in run)
    names = ", ".join(unicodedata.name(ch, f"U+{ord(ch):04X}") for ch in run)
    return format_html(
        '<mark class="toolroom-hidden" style="{}" title="{}">⟦{}⟧</mark>', _STYLE, names, points
    )


@register.filter(name="show_hidden")
def show_hidden(value: object) -> SafeString:
    """`value` as escaped text with every hidden character marked."""
    text = "" if value is None else str(value)
    parts: list[str] = []
    last = 0
    for start, end, kind in hidden_runs(text):
        parts.append(escape(text[last:start]))
        parts.append(_marked(text[start:end], kind))
        last = end
    parts.append(escape(text[last:]))
    return mark_safe("".join(parts))  # noqa: S308 (every part is escaped or format_html)
