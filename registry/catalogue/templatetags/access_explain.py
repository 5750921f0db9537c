"""Admin blocks that show `registry.catalogue.explain` answers: who can use a tool, and what
would still block an access request. Thin: each tag calls one selector and renders an include."""

from __future__ import annotations

from typing import Any

from django import template

from registry.catalogue.explain import access_request_blockers, tool_access_overview
from registry.servers.models import Tool
from registry.teams.models import AccessRequest, AccessRequestState

register = template.Library()


@register.inclusion_tag("admin/catalogue/who_can_use.html")
def tool_who_can_use(tool: Tool) -> dict[str, Any]:
    explanations = tool_access_overview(tool=tool)
    return {
        "explanations": explanations,
        "callable_count": sum(1 for explanation in explanations if explanation.callable),
    }


@register.inclusion_tag("admin/catalogue/access_request_blockers.html")
def access_request_still_blocked_by(access_request: AccessRequest) -> dict[str, Any]:
    explanations = access_request_blockers(request=access_request)
    return {
        "access_request": access_request,
        "pending": access_request.state == AccessRequestState.PENDING,
        "explanations": explanations,
        "blocked": [explanation for explanation in explanations if not explanation.callable],
    }
