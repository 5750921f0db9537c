"""Reads of the gateway's call records for the people who made them."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from registry.gateway.models import ToolCall


def person_recent_calls(
    *, person: AbstractBaseUser | AnonymousUser, limit: int = 100
) -> list[ToolCall]:
    """The person's own most recent calls (through any app acting for them), newest first; one
    query (the index on person and time)."""
    if person.pk is None:
        return []
    return list(
        ToolCall.objects.filter(person_id=person.pk)
        .select_related("team")
        .order_by("-started_at", "-id")[:limit]
    )
