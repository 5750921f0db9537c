"""Reads of teams and what they can ask for, for the API, the admin and the commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, Prefetch, Q, QuerySet

from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.teams.models import AgentToken, Team
from registry.teams.tokens import tokens_last_used


def requestable_servers(*, category: str | None = None) -> QuerySet[McpServer]:
    """Approved servers with their offered tools: what any team may browse and ask for.

    Nothing here depends on a team: it shows the registry's approved offer, never who has what.
    """
    servers = (
        McpServer.objects.filter(review_status=ReviewStatus.APPROVED)
        .select_related("category", "status")
        .prefetch_related(
            # The browse serializer lists each server's live tools.
            Prefetch(
                "tools",
                queryset=Tool.objects.filter(removed_at__isnull=True).order_by("name"),
                to_attr="live_tools",
            )
        )
        .order_by("slug")
    )
    if category:
        servers = servers.filter(category__slug=category)
    return servers


class TeamCounts(TypedDict):
    """What `teams_with_counts` adds to each team."""

    members_count: int
    grants_count: int
    agents_count: int


if TYPE_CHECKING:  # an alias for the type checker (the plugin reads the two arguments)
    from django_stubs_ext import WithAnnotations

    TeamWithCounts = WithAnnotations[Team, TeamCounts]


def teams_with_counts() -> QuerySet[TeamWithCounts]:
    """Teams with their member, active grant and usable agent-token counts (admin list)."""
    return Team.objects.annotate(
        members_count=Count("memberships", distinct=True),
        grants_count=Count("grants", filter=Q(grants__revoked_at__isnull=True), distinct=True),
        agents_count=Count(
            "agent_tokens", filter=Q(agent_tokens__revoked_at__isnull=True), distinct=True
        ),
    )


def agent_tokens_with_last_use(tokens: list[AgentToken]) -> list[AgentToken]:
    """The tokens with `last_used_at` brought up to the moment the cache knows."""
    fresh = tokens_last_used([token.pk for token in tokens])
    for token in tokens:
        cached = fresh.get(token.pk)
        if cached is not None and (token.last_used_at is None or cached > token.last_used_at):
            token.last_used_at = cached
    return tokens
