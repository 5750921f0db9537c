"""What team members read and do: their teams, the approved offer, grants, access requests, agents.

Thin views: an input serializer, one service, an output serializer. Every queryset of team rows
goes through `TeamScopedViewSet`, which restricts it to the caller's teams first.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from registry.access.private_data import RatchetUnavailable, private_data_reset
from registry.api.pagination import TeamListPagination
from registry.api.permissions import IsPerson
from registry.api.serializers import (
    AccessRequestCreateSerializer,
    AccessRequestSerializer,
    AgentTokenCreatedSerializer,
    AgentTokenCreateSerializer,
    AgentTokenDeclareSerializer,
    AgentTokenSerializer,
    AgentTokenToolExposureSerializer,
    BrowseQuerySerializer,
    BrowseServerSerializer,
    GrantSerializer,
    PrivateDataResetResultSerializer,
    PrivateDataResetSerializer,
    RevokeSerializer,
    TeamSerializer,
    TeamToolExposureSerializer,
)
from registry.api.throttling import DegradableScopedRateThrottle
from registry.api.viewsets import TeamScopedViewSet
from registry.core.api_errors import api_error_body
from registry.servers.models import McpServer
from registry.teams import services
from registry.teams.models import AccessRequest, AgentToken, Grant, Team, TeamAction, teams_for_user
from registry.teams.selectors import agent_tokens_with_last_use, requestable_servers

TEAM_FILTER = OpenApiParameter(
    "team", OpenApiTypes.STR, description="Only rows of this team (its slug)."
)
ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid input (error format)."),
    403: OpenApiResponse(OpenApiTypes.OBJECT, description="Not allowed (error format)."),
    404: OpenApiResponse(OpenApiTypes.OBJECT, description="Not found (error format)."),
}


@extend_schema_view(
    list=extend_schema(summary="The caller's teams", tags=["teams"]),
    retrieve=extend_schema(summary="One of the caller's teams", tags=["teams"]),
)
class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Team]):
    permission_classes = [IsPerson]
    pagination_class = TeamListPagination
    serializer_class = TeamSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def get_queryset(self) -> QuerySet[Team]:
        return (
            teams_for_user(self.request.user, TeamAction.VIEW)
            # The serializer lists roles and members.
            .prefetch_related("roles", "memberships__user")
            .order_by("slug")
        )

    @extend_schema(
        summary="How the gateway offers tools to the team's agents by default (team owners)",
        request=TeamToolExposureSerializer,
        responses={200: TeamSerializer, **ERRORS},
        tags=["teams"],
    )
    @action(detail=True, methods=["post"], url_path="tool-exposure")
    def tool_exposure(self, request: Request, slug: str | None = None) -> Response:
        team = self.get_object()
        if not teams_for_user(request.user, TeamAction.MANAGE).filter(pk=team.pk).exists():
            raise PermissionDenied("Only the team's owners can do this.")
        data = TeamToolExposureSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        updated = services.team_tool_exposure_set(
            actor=request.user, team=team, exposure=data.validated_data["tool_exposure"]
        )
        return Response(TeamSerializer(updated).data)

    @extend_schema(
        summary="Reset the team's private-data ratchet (team owners; audited)",
        description="Clears the private-data marks of the team's agent tokens and people, so "
        "connect-class tools are callable again after a confidential read (docs/gateway.md, "
        '"The private-data ratchet"). Recorded in the audit trail with what was cleared. 503 '
        "when the shared cache refuses.",
        request=PrivateDataResetSerializer,
        responses={200: PrivateDataResetResultSerializer, **ERRORS},
        tags=["teams"],
    )
    @action(detail=True, methods=["post"], url_path="private-data-reset")
    def private_data_reset(self, request: Request, slug: str | None = None) -> Response:
        team = self.get_object()
        if not teams_for_user(request.user, TeamAction.MANAGE).filter(pk=team.pk).exists():
            raise PermissionDenied("Only the team's owners can do this.")
        data = PrivateDataResetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            reset = private_data_reset(
                actor=request.user, team=team, reason=data.validated_data["reason"]
            )
        except RatchetUnavailable:
            return Response(
                api_error_body(
                    "ratchet_unavailable",
                    "The shared cache refuses; the private-data marks were not reset.",
                ),
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response({"team": team.slug, "cleared": reset.cleared})


@extend_schema_view(
    list=extend_schema(
        summary="Approved servers and their tools, which a team may ask for",
        parameters=[BrowseQuerySerializer],
        tags=["browse"],
    ),
    retrieve=extend_schema(summary="One approved server and its tools", tags=["browse"]),
)
class BrowseServerViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[McpServer],
):
    permission_classes = [IsPerson]
    pagination_class = TeamListPagination
    serializer_class = BrowseServerSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def get_queryset(self) -> QuerySet[McpServer]:
        query = BrowseQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return requestable_servers(category=query.validated_data.get("category"))


@extend_schema_view(
    list=extend_schema(
        summary="Grants of the caller's teams", parameters=[TEAM_FILTER], tags=["grants"]
    ),
    retrieve=extend_schema(summary="One grant", tags=["grants"]),
)
class GrantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = GrantSerializer

    def base_queryset(self) -> Any:
        # The serializer names the team, server, tool and role.
        return Grant.objects.filter(revoked_at__isnull=True).select_related(
            "team", "server", "tool", "role"
        )


@extend_schema_view(
    list=extend_schema(
        summary="Access requests of the caller's teams",
        parameters=[TEAM_FILTER],
        tags=["access requests"],
    ),
    retrieve=extend_schema(summary="One access request", tags=["access requests"]),
)
class AccessRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = AccessRequestSerializer
    throttle_scope = "access_requests"

    def get_throttles(self) -> list[BaseThrottle]:
        # Asking and withdrawing are throttled per person; reading is not.
        if self.action in ("create", "withdraw"):
            return [DegradableScopedRateThrottle()]
        return []

    def base_queryset(self) -> Any:
        # The serializer names the team, server, tool, role and requester.
        return AccessRequest.objects.select_related(
            "team", "server", "tool", "role", "requested_by"
        )

    @extend_schema(
        summary="Ask for access to a server or one of its tools",
        description="A member asks for their team, with a justification, optionally for one "
        "role and until a wished moment. An open request for the same thing is refused; a "
        "request for a tool that is not approved yet stays pending and `waiting_for` says why.",
        request=AccessRequestCreateSerializer,
        responses={201: AccessRequestSerializer, **ERRORS},
        tags=["access requests"],
    )
    def create(self, request: Request) -> Response:
        data = AccessRequestCreateSerializer(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        created = services.access_request_create(
            actor=request.user,  # type: ignore[arg-type]
            **data.validated_data,
        )
        return Response(AccessRequestSerializer(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Withdraw a pending request (its requester or a team owner)",
        request=None,
        responses={200: AccessRequestSerializer, **ERRORS},
        tags=["access requests"],
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        access_request = self.get_object()
        if access_request.requested_by_id != request.user.pk:
            self.require_team_manager(access_request.team)
        withdrawn = services.access_request_withdraw(actor=request.user, request=access_request)
        return Response(AccessRequestSerializer(withdrawn).data)


@extend_schema_view(
    list=extend_schema(
        summary="Agent tokens of the caller's teams", parameters=[TEAM_FILTER], tags=["agents"]
    ),
    retrieve=extend_schema(summary="One agent token (never the token itself)", tags=["agents"]),
)
class AgentTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = AgentTokenSerializer

    def base_queryset(self) -> Any:
        # The serializer names the team and role.
        return AgentToken.objects.select_related("team", "role")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        tokens = agent_tokens_with_last_use(list(page or []))
        return self.get_paginated_response(AgentTokenSerializer(tokens, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        token = agent_tokens_with_last_use([self.get_object()])[0]
        return Response(AgentTokenSerializer(token).data)

    @extend_schema(
        summary="Create an agent token (team owners); the token is in this answer only",
        request=AgentTokenCreateSerializer,
        responses={201: AgentTokenCreatedSerializer, **ERRORS},
        tags=["agents"],
    )
    def create(self, request: Request) -> Response:
        data = AgentTokenCreateSerializer(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        self.require_team_manager(data.validated_data["team"])
        created = services.agent_token_create(actor=request.user, **data.validated_data)
        body = AgentTokenCreatedSerializer(created.token).data
        body["token"] = created.plain
        # The token is in this answer only: no cache (browser, proxy) may keep a copy.
        return Response(
            body,
            status=status.HTTP_201_CREATED,
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )

    @extend_schema(
        summary="Revoke an agent token (team owners); it gets 401 from the next request on",
        request=RevokeSerializer,
        responses={200: AgentTokenSerializer, **ERRORS},
        tags=["agents"],
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        self.require_team_manager(token.team)
        data = RevokeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        revoked = services.agent_token_revoke(
            actor=request.user,
            token=token,
            reason=data.validated_data.get("reason", ""),
        )
        return Response(AgentTokenSerializer(revoked).data)

    @extend_schema(
        summary="Declare the servers the agent requires, recommends or may use (team owners)",
        request=AgentTokenDeclareSerializer,
        responses={200: AgentTokenSerializer, **ERRORS},
        tags=["agents"],
    )
    @action(detail=True, methods=["post"], url_path="declare-servers")
    def declare_servers(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        self.require_team_manager(token.team)
        data = AgentTokenDeclareSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        updated = services.agent_token_declare_servers(
            actor=request.user,
            token=token,
            declared_servers=data.validated_data["declared_servers"],
        )
        return Response(AgentTokenSerializer(updated).data)

    @extend_schema(
        summary="How the gateway offers tools to this agent: all, search, or the team's default "
        "(team owners)",
        request=AgentTokenToolExposureSerializer,
        responses={200: AgentTokenSerializer, **ERRORS},
        tags=["agents"],
    )
    @action(detail=True, methods=["post"], url_path="tool-exposure")
    def tool_exposure(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        self.require_team_manager(token.team)
        data = AgentTokenToolExposureSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        updated = services.agent_token_tool_exposure_set(
            actor=request.user, token=token, exposure=data.validated_data["tool_exposure"]
        )
        return Response(AgentTokenSerializer(updated).data)
