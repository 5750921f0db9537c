"""Teams (each backed by a Django group, for django-guardian), memberships, roles, grants, access
requests and agent tokens.

Rules about a row's own data live in `clean()`; every change goes through `services`, which keeps
guardian's object permissions, the audit trail and the catalogue versions in step.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from registry.servers.models import McpServer, PermissionClass, Tool

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class TeamAction(models.TextChoices):
    """What a person may do with a team's rows: members view, owners manage."""

    VIEW = "view", "View"
    MANAGE = "manage", "Manage"


# The guardian permission behind each action, on the Team object.
TEAM_PERMISSIONS = {TeamAction.VIEW: "teams.view_team", TeamAction.MANAGE: "teams.manage_team"}


def teams_for_user(user: AbstractBaseUser | AnonymousUser, action: str) -> models.QuerySet[Team]:
    """The teams on which `user` holds the object permission for `action` (guardian).

    Membership gives the team's group `view_team` on the team; ownership gives the owner
    `manage_team`. Superusers get no special treatment here: the API is for team members, the
    Django admin is for platform admins.
    """
    from guardian.shortcuts import get_objects_for_user  # noqa: PLC0415

    if not user.is_authenticated or not user.is_active:
        return Team.objects.none()
    teams: models.QuerySet[Team] = get_objects_for_user(
        user,
        TEAM_PERMISSIONS[TeamAction(action)],
        klass=Team,
        with_superuser=False,
        accept_global_perms=False,
    )
    return teams


class ToolExposure(models.TextChoices):
    """How the gateway offers a team's tools to an agent (docs/gateway.md, "Search mode")."""

    ALL = "all", "All tools"
    SEARCH = "search", "Search: pinned tools plus find_tools and call_tool"


class Team(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    group = models.OneToOneField(
        Group,
        on_delete=models.PROTECT,
        related_name="toolroom_team",
        editable=False,
        help_text="The Django group of the team's members; guardian's object permissions hang "
        "on it.",
    )
    # Bumped by every change that can alter what the team's agents see; the ETag of its
    # catalogue is derived from it. The database is the source of truth, the cache a copy.
    catalogue_version = models.PositiveBigIntegerField(default=1, editable=False)
    # The gateway's tools/list for agents whose token does not choose (AgentToken.tool_exposure).
    tool_exposure = models.CharField(
        max_length=10, choices=ToolExposure.choices, default=ToolExposure.ALL
    )
    # The private-data ratchet's window for this team's tokens and people (docs/gateway.md);
    # None: TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS.
    ratchet_window_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(60)],
        help_text="How long after a confidential read this team's tokens (and people) stay "
        "refused connect-class tools, in seconds (at least 60). Empty: the installation's "
        "default (TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_team", "Can manage the team's agents and requests")]

    def __str__(self) -> str:
        return self.name


class TeamRoleQuerySet(models.QuerySet["TeamRole"]):
    def allowing(self, permission_class: str) -> TeamRoleQuerySet:
        return self.filter(**{f"allows_{permission_class}": True})


class TeamRole(models.Model):
    """What a team's agents of this role may see, by tool permission class."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="roles")
    name = models.SlugField(max_length=40)
    description = models.CharField(max_length=300, blank=True)
    allows_read = models.BooleanField(default=True)
    allows_write = models.BooleanField(default=False)
    allows_connect = models.BooleanField(default=False)

    objects = TeamRoleQuerySet.as_manager()

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"],
                name="team_role_unique_name",
                violation_error_message="This team already has a role with this name.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}" if self.team_id else self.name

    @property
    def permission_classes(self) -> list[str]:
        return [
            pc
            for pc in PermissionClass.values
            if getattr(self, f"allows_{pc}", False)  # read, write, connect
        ]

    def clean(self) -> None:
        if not (self.allows_read or self.allows_write or self.allows_connect):
            raise ValidationError(
                {"allows_read": "A role must allow at least one permission class."}
            )


class MembershipLevel(models.TextChoices):
    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    level = models.CharField(
        max_length=10, choices=MembershipLevel.choices, default=MembershipLevel.MEMBER
    )
    # Which of the team's roles the person may act as through an MCP client they sign in with
    # (OAuth, docs/authentication.md). Owners may act as every role of the team.
    roles = models.ManyToManyField(
        TeamRole,
        blank=True,
        related_name="+",
        help_text="The roles this member may act as through the apps they sign in to (owners: "
        "every role).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "user"],
                name="membership_unique_user",
                violation_error_message="This person is already a member of the team.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.level})"

    def clean(self) -> None:
        # Only checkable once saved (a many-to-many needs the row); the service checks before.
        if self.pk is not None and self.roles.exclude(team_id=self.team_id).exists():
            raise ValidationError({"roles": "A member may only act as roles of their own team."})


class TeamOwnedQuerySet(models.QuerySet[Any]):
    """Rows that belong to a team; `restrict()` is applied before anything else reads them."""

    def restrict(self, user: AbstractBaseUser | AnonymousUser, action: str = "view") -> Any:
        return self.filter(team__in=teams_for_user(user, action).values("pk"))


class GrantQuerySet(TeamOwnedQuerySet):
    def active(self, at: datetime | None = None) -> GrantQuerySet:
        """Grants in force: not revoked, not expired (enforced here, when reading)."""
        at = at or timezone.now()
        result: GrantQuerySet = self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=at)
        )
        return result

    def for_role(self, role_id: int) -> GrantQuerySet:
        result: GrantQuerySet = self.filter(Q(role__isnull=True) | Q(role_id=role_id))
        return result


class Grant(models.Model):
    """A server (all its approved tools) or one tool granted to a team, maybe for one role only,
    maybe until a moment. Revoked grants are kept, for the trail."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="grants")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="team_grants")
    tool = models.ForeignKey(
        Tool,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="team_grants",
        help_text="Empty: every approved tool of the server.",
    )
    role = models.ForeignKey(
        TeamRole,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="grants",
        help_text="Empty: every role of the team.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)
    granted_by_label = models.CharField(max_length=200)
    granted_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_label = models.CharField(max_length=200, blank=True)
    revoke_reason = models.TextField(blank=True)
    # When the team's owners were told that it ends soon (registry/notifications/changes.py);
    # cleared when the end moves.
    expiry_notice_sent_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["team", "server__slug", "tool__name", "-granted_at"]
        constraints = [
            models.UniqueConstraint(
                "team",
                "server",
                Coalesce("tool", Value(0)),
                Coalesce("role", Value(0)),
                condition=Q(revoked_at__isnull=True),
                name="grant_one_active_per_scope",
                violation_error_message="The team already has this grant.",
            )
        ]
        indexes = [
            models.Index(fields=["team", "revoked_at"], name="grant_team_active_idx"),
            models.Index(fields=["server", "revoked_at"], name="grant_server_active_idx"),
        ]

    def __str__(self) -> str:
        what = f"{self.server.slug}/{self.tool.name}" if self.tool is not None else self.server.slug
        return f"{what} to {self.team.slug}" + (
            f" ({self.role.name})" if self.role is not None else ""
        )

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.tool is not None and self.server_id and self.tool.server_id != self.server_id:
            errors["tool"] = "The tool must belong to the granted server."
        if self.role is not None and self.team_id and self.role.team_id != self.team_id:
            errors["role"] = "The role must be one of the team's roles."
        if self._state.adding and self.expires_at is not None and self.expires_at <= timezone.now():
            errors["expires_at"] = "The expiry must be in the future."
        if errors:
            raise ValidationError(errors)


class AccessRequestState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"
    WITHDRAWN = "withdrawn", "Withdrawn"


class AccessRequestQuerySet(TeamOwnedQuerySet):
    def pending(self) -> AccessRequestQuerySet:
        result: AccessRequestQuerySet = self.filter(state=AccessRequestState.PENDING)
        return result


class AccessRequest(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="access_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="+")
    tool = models.ForeignKey(
        Tool, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    role = models.ForeignKey(
        TeamRole, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    justification = models.TextField()
    wished_expires_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(
        max_length=10, choices=AccessRequestState.choices, default=AccessRequestState.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by_label = models.CharField(max_length=200, blank=True)
    decision_reason = models.TextField(blank=True)
    grant = models.ForeignKey(
        Grant, null=True, blank=True, on_delete=models.SET_NULL, related_name="access_requests"
    )

    objects = AccessRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                "team",
                "server",
                Coalesce("tool", Value(0)),
                Coalesce("role", Value(0)),
                condition=Q(state="pending"),
                name="access_request_one_open_per_scope",
                violation_error_message="The team already has an open request for this.",
            )
        ]
        indexes = [models.Index(fields=["state", "-created_at"], name="access_request_state_idx")]

    def __str__(self) -> str:
        what = f"{self.server.slug}/{self.tool.name}" if self.tool is not None else self.server.slug
        return f"{self.team.slug} asks for {what}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if not self.justification.strip():
            errors["justification"] = "Say why the team needs this access."
        if self.tool is not None and self.server_id and self.tool.server_id != self.server_id:
            errors["tool"] = "The tool must belong to the requested server."
        if self.role is not None and self.team_id and self.role.team_id != self.team_id:
            errors["role"] = "The role must be one of the team's roles."
        if (
            self._state.adding
            and self.wished_expires_at is not None
            and self.wished_expires_at <= timezone.now()
        ):
            errors["wished_expires_at"] = "The wished expiry must be in the future."
        if errors:
            raise ValidationError(errors)


class DependencyLevel(models.TextChoices):
    REQUIRED = "required", "Required"
    RECOMMENDED = "recommended", "Recommended"
    OPTIONAL = "optional", "Optional"


class AgentTokenQuerySet(TeamOwnedQuerySet):
    def usable(self, at: datetime | None = None) -> AgentTokenQuerySet:
        at = at or timezone.now()
        result: AgentTokenQuerySet = self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=at)
        )
        return result


class AgentToken(models.Model):
    """An agent's credential: one team, one role. Only a prefix and a SHA-256 hash are kept; the
    token itself is shown once, when it is created."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agent_tokens")
    role = models.ForeignKey(TeamRole, on_delete=models.PROTECT, related_name="agent_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    # {"required": [server slugs], "recommended": [...], "optional": [...]}: what the agent needs,
    # so the catalogue can tell it early what is missing.
    declared_servers = models.JSONField(default=dict, blank=True)
    # "" follows the team's default (Team.tool_exposure); in search mode the declared servers'
    # tools are the pinned ones the gateway lists beside find_tools and call_tool.
    tool_exposure = models.CharField(
        max_length=10, choices=ToolExposure.choices, blank=True, default=""
    )
    created_by_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_label = models.CharField(max_length=200, blank=True)
    # Written at most once a minute per token; the cache holds the exact moment in between.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = AgentTokenQuerySet.as_manager()

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=Q(revoked_at__isnull=True),
                name="agent_token_unique_active_name",
                violation_error_message="The team already has an agent token with this name.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.team.slug}/{self.role.name})"

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.role_id and self.team_id and self.role.team_id != self.team_id:
            errors["role"] = "The role must be one of the team's roles."
        if self._state.adding and self.expires_at is not None and self.expires_at <= timezone.now():
            errors["expires_at"] = "The expiry must be in the future."
        declared = self.declared_servers or {}
        if not isinstance(declared, dict) or not all(
            level in DependencyLevel.values
            and isinstance(slugs, list)
            and all(isinstance(slug, str) and slug for slug in slugs)
            for level, slugs in declared.items()
        ):
            errors["declared_servers"] = (
                "Declare servers as {'required': [slugs], 'recommended': [...], 'optional': [...]}."
            )
        if errors:
            raise ValidationError(errors)
