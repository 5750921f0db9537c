"""Shared pieces of the vetting workplace's pages: the coloured badges for statuses and reviews
(of tools, resources and prompts)."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.servers.models import (
    ApprovalState,
    Health,
    ItemReview,
    ReviewStatus,
    ServerPrompt,
    ServerResource,
)
from registry.servers.selectors import (
    ToolReviewState,
)

_BADGE_COLOURS: dict[str, str] = {
    ReviewStatus.DRAFT: "#777",
    ReviewStatus.PENDING_REVIEW: "#b26b00",
    ReviewStatus.APPROVED: "#1a7f37",
    ReviewStatus.REJECTED: "#b42318",
    ReviewStatus.SUSPENDED: "#b42318",
    ReviewStatus.RETIRED: "#555",
    Health.UNKNOWN: "#777",
    Health.HEALTHY: "#1a7f37",
    Health.DEGRADED: "#b26b00",
    Health.UNHEALTHY: "#b42318",
    ApprovalState.UNAPPROVED: "#b26b00",
    ApprovalState.APPROVED: "#1a7f37",
    ApprovalState.CHANGED: "#b42318",
    ApprovalState.REVOKED: "#555",
}


_REVIEW_COLOURS = {
    "new": "#b26b00",
    "flagged": "#b42318",
    "changed": "#b42318",
    "revoked": "#555",
    "approved": "#1a7f37",
    "removed": "#777",
}


def review_badge(state: ToolReviewState) -> SafeString:
    """A tool's review state as a coloured badge (the colour by state, the words say the rest)."""
    return format_html(
        '<span class="review-badge review-{}" style="color:#fff;background:{};padding:1px 6px;'
        'border-radius:8px;display:inline-block">{}</span>',
        state.key,
        _REVIEW_COLOURS.get(state.key, "#555"),
        state.label,
    )


def item_review_badge(item: ServerResource | ServerPrompt) -> SafeString:
    """A resource's or prompt's review as a badge: approved, awaiting approval, changed since
    approval, or hidden."""
    if item.is_approved:
        key, label = "approved", "Approved"
    elif item.review_state == ItemReview.HIDDEN:
        key, label = "revoked", "Hidden"
    elif item.definition_changed:
        key, label = "changed", "Changed since approval"
    else:
        key, label = "new", "Awaiting approval"
    return review_badge(ToolReviewState(key, label))


def badge(value: str, label: str) -> SafeString:
    colour = _BADGE_COLOURS.get(value, "#555")
    return format_html(
        '<span style="color:#fff;background:{};padding:1px 6px;border-radius:8px;'
        'white-space:nowrap">{}</span>',
        colour,
        label,
    )
