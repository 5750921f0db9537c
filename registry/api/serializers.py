"""Input and output serializers of the team-facing API and the catalogue's query parameters.

Input serializers resolve slugs and names only among what the caller may see (their teams, the
approved servers), so a foreign or unknown object gets the same answer: it does not exist.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from registry.catalogue.client_configs import CLIENT_CHOICES_MESSAGE, CLIENT_CONFIGS
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.teams.models import (
    AccessRequest,
    AgentToken,
    DependencyLevel,
    Grant,
    Membership,
    Team,
    TeamAction,
    TeamRole,
    ToolExposure,
    teams_for_user,
)
from registry.teams.services import access_request_waiting_for

# --- Query parameters ---------------------------------------------------------------------------


class StrictInputSerializer(serializers.Serializer[Any]):
    """A request body whose unknown keys are a 400: a misspelt key (`Required` for `required`)
    must not be dropped silently and turn the request into something else (an erase)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                known = ", ".join(sorted(self.fields)) or "none"
                raise serializers.ValidationError(
                    {name: [f"Unknown key; the keys are: {known}."] for name in unknown}
                )
        return super().to_internal_value(data)


class ClientConfigQuerySerializer(serializers.Serializer[Any]):
    client = serializers.ChoiceField(
        choices=CLIENT_CONFIGS,
        default="claude-code",
        error_messages={"invalid_choice": CLIENT_CHOICES_MESSAGE},
    )


class OfficialListQuerySerializer(serializers.Serializer[Any]):
    cursor = serializers.CharField(required=False, max_length=200)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=100, default=30)
    search = serializers.CharField(required=False, max_length=200)
    version = serializers.CharField(required=False, max_length=255)


class BrowseQuerySerializer(serializers.Serializer[Any]):
    category = serializers.SlugField(required=False, max_length=60)


# --- Teams --------------------------------------------------------------------------------------


class RoleSerializer(serializers.ModelSerializer[TeamRole]):
    permission_classes = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = TeamRole
        fields = ["name", "description", "permission_classes"]


class MemberSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "level"]


class TeamSerializer(serializers.ModelSerializer[Team]):
    roles = RoleSerializer(many=True, read_only=True)
    members = MemberSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Team
        fields = ["slug", "name", "description", "tool_exposure", "roles", "members"]


# --- Browsing the registry ----------------------------------------------------------------------


class BrowseToolSerializer(serializers.ModelSerializer[Tool]):
    approved = serializers.BooleanField(source="is_approved", read_only=True)
    description = serializers.SerializerMethodField()

    class Meta:
        model = Tool
        fields = ["name", "title", "description", "permission_class", "approved"]

    def get_description(self, tool: Tool) -> str:
        # A definition nobody approved yet is not shown: its text has not been vetted.
        return tool.description if tool.is_approved else ""


class CategorySerializer(serializers.Serializer[Any]):
    slug = serializers.CharField()
    name = serializers.CharField()


class BrowseServerSerializer(serializers.ModelSerializer[McpServer]):
    category = CategorySerializer(allow_null=True, read_only=True)
    health = serializers.SerializerMethodField()
    tools = BrowseToolSerializer(source="live_tools", many=True, read_only=True)

    class Meta:
        model = McpServer
        fields = [
            "slug",
            "name",
            "description",
            "category",
            "version",
            "homepage_url",
            "repository_url",
            "health",
            "tools",
        ]

    def get_health(self, server: McpServer) -> str:
        status = getattr(server, "status", None)
        return status.health if status else "unknown"


# --- Grants -------------------------------------------------------------------------------------


class GrantSerializer(serializers.ModelSerializer[Grant]):
    team = serializers.CharField(source="team.slug", read_only=True)
    server = serializers.CharField(source="server.slug", read_only=True)
    tool = serializers.CharField(source="tool.name", read_only=True, allow_null=True)
    role = serializers.CharField(source="role.name", read_only=True, allow_null=True)
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = Grant
        fields = ["id", "team", "server", "tool", "role", "expires_at", "granted_at", "active"]


# --- Access requests ----------------------------------------------------------------------------


class AccessRequestSerializer(serializers.ModelSerializer[AccessRequest]):
    team = serializers.CharField(source="team.slug", read_only=True)
    server = serializers.CharField(source="server.slug", read_only=True)
    tool = serializers.CharField(source="tool.name", read_only=True, allow_null=True)
    role = serializers.CharField(source="role.name", read_only=True, allow_null=True)
    requested_by = serializers.CharField(
        source="requested_by.username", read_only=True, allow_null=True
    )
    waiting_for = serializers.SerializerMethodField()

    class Meta:
        model = AccessRequest
        fields = [
            "id",
            "team",
            "server",
            "tool",
            "role",
            "justification",
            "wished_expires_at",
            "state",
            "waiting_for",
            "requested_by",
            "created_at",
            "decided_at",
            "decision_reason",
        ]

    def get_waiting_for(self, request: AccessRequest) -> str:
        return access_request_waiting_for(request)


_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,80}$")


@extend_schema_field(OpenApiTypes.STR)
class _SlugField(serializers.SlugRelatedField[Any]):
    """A slug resolved to a row; something that is no slug at all is answered like a missing row
    (and never reaches the database, which may refuse some characters outright)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not _SLUG.match(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:80])
        return super().to_internal_value(data)


class _CallerTeamField(_SlugField):
    """A team slug, resolved only among the caller's teams."""

    def get_queryset(self) -> Any:
        return teams_for_user(self.context["request"].user, TeamAction.VIEW)


class AccessRequestCreateSerializer(StrictInputSerializer):
    team = _CallerTeamField(slug_field="slug")
    server = _SlugField(
        slug_field="slug", queryset=McpServer.objects.filter(review_status=ReviewStatus.APPROVED)
    )
    tool = serializers.CharField(required=False, allow_blank=False, max_length=200)
    role = serializers.SlugField(required=False, max_length=40)
    justification = serializers.CharField(max_length=5000)
    wished_expires_at = serializers.DateTimeField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        tool_name = attrs.pop("tool", None)
        attrs["tool"] = None
        if tool_name is not None:
            tool = Tool.objects.filter(
                server=attrs["server"], name=tool_name, removed_at__isnull=True
            ).first()
            if tool is None:
                raise serializers.ValidationError({"tool": "The server offers no such tool."})
            attrs["tool"] = tool
        role_name = attrs.pop("role", None)
        attrs["role"] = None
        if role_name is not None:
            role = TeamRole.objects.filter(team=attrs["team"], name=role_name).first()
            if role is None:
                raise serializers.ValidationError({"role": "The team has no such role."})
            attrs["role"] = role
        return attrs


# --- Agent tokens -------------------------------------------------------------------------------


class DeclaredServersSerializer(StrictInputSerializer):
    required = serializers.ListField(  # type: ignore[assignment]
        child=serializers.SlugField(max_length=80), required=False, max_length=100
    )
    recommended = serializers.ListField(
        child=serializers.SlugField(max_length=80), required=False, max_length=100
    )
    optional = serializers.ListField(
        child=serializers.SlugField(max_length=80), required=False, max_length=100
    )


class AgentTokenSerializer(serializers.ModelSerializer[AgentToken]):
    team = serializers.CharField(source="team.slug", read_only=True)
    role = serializers.CharField(source="role.name", read_only=True)
    usable = serializers.BooleanField(source="is_usable", read_only=True)
    declared_servers = DeclaredServersSerializer(read_only=True)

    class Meta:
        model = AgentToken
        fields = [
            "id",
            "team",
            "role",
            "name",
            "prefix",
            "declared_servers",
            "tool_exposure",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "usable",
        ]


class AgentTokenCreatedSerializer(AgentTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The token itself: shown this once, never again."
    )

    class Meta(AgentTokenSerializer.Meta):
        fields = [*AgentTokenSerializer.Meta.fields, "token"]


class AgentTokenCreateSerializer(StrictInputSerializer):
    team = _CallerTeamField(slug_field="slug")
    role = serializers.SlugField(max_length=40)
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    declared_servers = DeclaredServersSerializer(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        role = TeamRole.objects.filter(team=attrs["team"], name=attrs["role"]).first()
        if role is None:
            raise serializers.ValidationError({"role": "The team has no such role."})
        attrs["role"] = role
        return attrs


class AgentTokenDeclareSerializer(StrictInputSerializer):
    declared_servers = DeclaredServersSerializer()


class AgentTokenToolExposureSerializer(StrictInputSerializer):
    tool_exposure = serializers.ChoiceField(
        choices=ToolExposure.choices,
        allow_blank=True,
        help_text="`all` tools, `search` (pinned tools plus find_tools and call_tool), or empty "
        "to follow the team's default.",
    )


class TeamToolExposureSerializer(StrictInputSerializer):
    tool_exposure = serializers.ChoiceField(choices=ToolExposure.choices)


class PrivateDataResetSerializer(StrictInputSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class PrivateDataResetResultSerializer(serializers.Serializer[Any]):
    team = serializers.CharField()
    cleared = serializers.DictField(
        child=serializers.CharField(),
        help_text="Each mark cleared (team:<id>:token|authorization|person:<id>) and the server "
        "whose confidential data it followed.",
    )


class RevokeSerializer(StrictInputSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


DEPENDENCY_LEVELS = DependencyLevel.values
