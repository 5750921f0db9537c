"""Who may call what: agents (an agent token) and people (a session, member of some team)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from registry.teams.tokens import AgentIdentity


class IsAgent(BasePermission):
    message = "This endpoint is for agents: send `Authorization: Bearer <agent token>`."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, AgentIdentity)


class IsPerson(BasePermission):
    """A signed-in person (not an agent); which teams they see is the queryset's business."""

    message = "This endpoint is for people signed in to Toolroom, not for agent tokens."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(
            user
            and user.is_authenticated
            and not isinstance(request.auth, AgentIdentity)
            and getattr(user, "is_active", False)
        )
