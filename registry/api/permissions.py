"""Who may call what: callers with a bearer token (an agent, or a person through an app) and
people signed in with a session."""

from __future__ import annotations

import time
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from registry.access.rules import caller_refusal
from registry.teams.callers import PersonIdentity
from registry.teams.tokens import AgentIdentity


class IsAgent(BasePermission):
    """A bearer token's caller: an agent, or a person's app while the person still stands (the
    access rules' caller rules: the token not expired; for a person: active, member of the team,
    role allowed, app not revoked)."""

    message = "This endpoint is for agents: send `Authorization: Bearer <agent token>`."

    def has_permission(self, request: Request, view: Any) -> bool:
        identity = request.auth
        if isinstance(identity, PersonIdentity):
            refusal = caller_refusal(identity, time.time())
            if refusal is not None:
                self.message = refusal.message
                return False
            return True
        return isinstance(identity, AgentIdentity)


class IsPerson(BasePermission):
    """A signed-in person (not an agent, nor an app acting for them); which teams they see is the
    queryset's business."""

    message = "This endpoint is for people signed in to Toolroom, not for agent or app tokens."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(
            user
            and user.is_authenticated
            and not isinstance(request.auth, AgentIdentity | PersonIdentity)
            and getattr(user, "is_active", False)
        )
