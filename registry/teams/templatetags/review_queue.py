"""`{% review_queue %}`: the review queue on the admin's landing page."""

from __future__ import annotations

from typing import Any

from django import template

from registry.teams.review_queue import review_queue as build_review_queue

register = template.Library()


@register.inclusion_tag("admin/review_queue.html", takes_context=True)
def review_queue(context: dict[str, Any]) -> dict[str, Any]:
    request = context["request"]
    # An inclusion tag renders in a context of its own: the links below the queue need `perms`.
    return {"queue": build_review_queue(user=request.user), "perms": context.get("perms")}
