"""Base viewsets: every queryset a team-facing view reads is restricted to the caller's teams first.

Subclasses implement `base_queryset()`; `get_queryset()` applies `restrict(user, "view")` to it, so
a view cannot forget the check. Actions that change a team's rows ask for `manage` (the team's
owners) through `require_team_manager`, after the object was found among the viewable ones: a
member who is not an owner gets 403, anyone else 404 as if the row did not exist.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers, viewsets
from rest_framework.exceptions import PermissionDenied

from registry.api.pagination import TeamListPagination
from registry.api.permissions import IsPerson
from registry.teams.models import Team, TeamAction, teams_for_user


class TeamFilterSerializer(serializers.Serializer[Any]):
    team = serializers.SlugField(required=False, max_length=60)


class TeamScopedViewSet(viewsets.GenericViewSet[Any]):
    permission_classes = [IsPerson]
    pagination_class = TeamListPagination
    lookup_value_regex = r"[0-9]+"

    def base_queryset(self) -> Any:
        """The rows before restriction; must support `.restrict(user, action)`."""
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        restricted: QuerySet[Any] = self.base_queryset().restrict(
            self.request.user, TeamAction.VIEW
        )
        if self.action == "list":
            query = TeamFilterSerializer(data=self.request.query_params)
            query.is_valid(raise_exception=True)
            if team_slug := query.validated_data.get("team"):
                restricted = restricted.filter(team__slug=team_slug)
        return restricted

    def require_team_manager(self, team: Team) -> None:
        if not teams_for_user(self.request.user, TeamAction.MANAGE).filter(pk=team.pk).exists():
            raise PermissionDenied("Only the team's owners can do this.")
