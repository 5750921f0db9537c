"""Admin blocks that show `registry.access.explain` answers: who can use a tool, and what
would still block an access request. Thin: each tag calls one selector and renders an include."""

from __future__ import annotations

from enum import Enum
from typing import Any

from django import template
from django.db.models import Choices
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from registry.access.explain import access_request_blockers, tool_access_overview
from registry.servers.models import Tool
from registry.teams.models import AccessRequest, AccessRequestState

register = template.Library()


@register.inclusion_tag("admin/access/who_can_use.html")
def tool_who_can_use(tool: Tool) -> dict[str, Any]:
    explanations = tool_access_overview(tool=tool)
    return {
        "explanations": explanations,
        "callable_count": sum(1 for explanation in explanations if explanation.callable),
    }


@register.inclusion_tag("admin/access/access_request_blockers.html")
def access_request_still_blocked_by(access_request: AccessRequest) -> dict[str, Any]:
    explanations = access_request_blockers(request=access_request)
    return {
        "access_request": access_request,
        "pending": access_request.state == AccessRequestState.PENDING,
        "explanations": explanations,
        "blocked": [explanation for explanation in explanations if not explanation.callable],
    }


def _human(value: Any) -> Any:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Choices):
        return value.label
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return ", ".join(str(_human(item)) for item in value) or "none"
    return value


@register.filter
def human_facts(facts: dict[str, Any]) -> SafeString:
    """A rule's facts as a definition list, in words: no Python reprs, nested ones indented."""
    if not facts:
        return format_html("<p>{}</p>", "-")
    rows = []
    for key, value in facts.items():
        label = key.replace("_", " ")
        shown = human_facts(value) if isinstance(value, dict) else _human(value)
        rows.append((label, shown))
    return format_html(
        '<dl class="facts">{}</dl>', format_html_join("", "<dt>{}</dt><dd>{}</dd>", rows)
    )
