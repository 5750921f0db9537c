"""Teams in the Django admin: members and roles, grants, access requests, agent tokens.

Every change made here goes through `registry.teams.services` (audited, guardian permissions and
catalogue versions kept in step); the admin gathers input and shows results. Memberships are the
easy-to-use face of guardian's object permissions: members view the team, owners manage it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from registry.core.admin_contributions import ContributedPage
from registry.core.admin_ids import object_id_or_404
from registry.core.errors import ApplicationError
from registry.core.service_admin import ServiceAdmin
from registry.teams import services
from registry.teams.models import (
    AccessRequest,
    AccessRequestState,
    AgentToken,
    Grant,
    Membership,
    Team,
    TeamRole,
)
from registry.teams.selectors import agent_tokens_with_last_use, teams_with_counts

if TYPE_CHECKING:
    from registry.teams.selectors import TeamWithCounts


class MembershipInline(admin.TabularInline[Membership, Team]):
    model = Membership
    extra = 1
    fields = ["user", "level"]
    autocomplete_fields = ["user"]
    # A member's roles (what they may act as through the apps they sign in to) are edited on the
    # membership's own page: a choice list per row here would cost a query per member.
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        # Each row's title names the user and the team: one query, not two per row.
        return super().get_queryset(request).select_related("user", "team")


class TeamRoleInline(admin.TabularInline[TeamRole, Team]):
    model = TeamRole
    extra = 0
    fields = ["name", "description", "allows_read", "allows_write", "allows_connect"]


@admin.register(Team)
class TeamAdmin(ServiceAdmin[Team], ContributedPage[Team]):
    change_form_template = "admin/teams/team/change_form.html"
    list_display = ["name", "slug", "members_count", "grants_count", "agents_count"]
    search_fields = ["name", "slug"]
    fields = ["name", "slug", "description", "ratchet_window_seconds"]
    inlines = [MembershipInline, TeamRoleInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return teams_with_counts()

    def get_readonly_fields(self, request: HttpRequest, obj: Team | None = None) -> list[str]:
        return ["slug"] if obj is not None else []

    @admin.display(description="Members", ordering="members_count")
    def members_count(self, obj: TeamWithCounts) -> int:
        return obj.members_count

    @admin.display(description="Active grants", ordering="grants_count")
    def grants_count(self, obj: TeamWithCounts) -> int:
        return obj.grants_count

    @admin.display(description="Agent tokens", ordering="agents_count")
    def agents_count(self, obj: TeamWithCounts) -> int:
        return obj.agents_count

    def delete_model(self, request: HttpRequest, obj: Team) -> None:
        services.team_delete(actor=request.user, team=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Team]) -> None:
        with transaction.atomic():
            for team in queryset:
                services.team_delete(actor=request.user, team=team)

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        if "ratchet_window_seconds" in form.changed_data and change:
            self.try_service(
                request,
                lambda: services.team_ratchet_window_set(
                    actor=request.user, team=obj, seconds=obj.ratchet_window_seconds
                ),
            )
        if change and not {"name", "description"} & set(form.changed_data):
            return
        if change:
            self.try_service(
                request,
                lambda: services.team_update(
                    actor=request.user, team=obj, name=obj.name, description=obj.description
                ),
            )
            return
        created = self.run_service(
            request,
            lambda: services.team_create(
                actor=request.user,
                slug=obj.slug,
                name=obj.name,
                description=obj.description,
            ),
        )
        if created is None:
            return
        obj.pk = created.pk
        obj.group = created.group

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        """Memberships and roles change through the services, one row at a time."""
        # The admin's change message reads these; nothing is saved by the formset itself.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        if self.save_failed(request):
            return
        team: Team = form.instance
        for deleted_form in formset.deleted_forms:
            deleted: Any = deleted_form.instance
            if deleted._state.adding:
                continue
            if isinstance(deleted, Membership):
                self.try_service(
                    request,
                    lambda r=deleted: services.team_member_remove(
                        actor=request.user, team=team, user=r.user
                    ),
                )
            else:
                messages.error(request, "Roles are not deleted: change what they allow instead.")
        for row_form in formset.forms:
            if not row_form.has_changed() or row_form in formset.deleted_forms:
                continue
            row: Any = row_form.instance
            if isinstance(row, Membership):
                self.try_service(
                    request,
                    lambda r=row: services.team_member_set(
                        actor=request.user, team=team, user=r.user, level=r.level
                    ),
                )
            elif isinstance(row, TeamRole) and row._state.adding:
                self.try_service(
                    request,
                    lambda r=row: services.role_create(
                        actor=request.user,
                        team=team,
                        name=r.name,
                        description=r.description,
                        allows_read=r.allows_read,
                        allows_write=r.allows_write,
                        allows_connect=r.allows_connect,
                    ),
                )
            elif isinstance(row, TeamRole):
                self.try_service(
                    request,
                    lambda r=row, f=row_form: services.role_update(
                        actor=request.user,
                        role=r,
                        changes={name: getattr(r, name) for name in f.changed_data},
                    ),
                )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        team = self.get_object(request, object_id)
        if team is not None:
            context["team_grants"] = list(
                Grant.objects.filter(team=team, revoked_at__isnull=True).select_related(
                    "server", "tool", "role"
                )[:500]
            )
            context["team_agents"] = agent_tokens_with_last_use(
                list(AgentToken.objects.filter(team=team).select_related("role")[:500])
            )
            context["team_pending_requests"] = list(
                AccessRequest.objects.pending()
                .filter(team=team)
                .select_related("server", "tool", "role", "requested_by")[:200]
            )
        return super().change_view(request, object_id, form_url, context)


def _expiry_picker() -> forms.DateTimeInput:
    """The browser's own date and time picker for expiries."""
    return forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")


class GrantAddForm(forms.ModelForm[Grant]):
    class Meta:
        model = Grant
        fields = ["team", "server", "tool", "role", "expires_at", "note"]
        widgets = {"expires_at": _expiry_picker()}


class RevokeForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)


@admin.register(Grant)
class GrantAdmin(ServiceAdmin[Grant]):
    form = GrantAddForm
    list_display = ["team", "server", "tool", "role", "expires_at", "granted_by", "state"]
    list_filter = ["team", "server", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["team", "server", "tool", "role"]
    search_fields = ["team__slug", "server__slug", "tool__name"]
    autocomplete_fields = ["server", "tool"]
    actions = ["revoke_selected"]

    @admin.display(description="Granted by", ordering="granted_by_label")
    def granted_by(self, obj: Grant) -> str:
        return obj.granted_by_label

    @admin.display(description="State")
    def state(self, obj: Grant) -> str:
        if obj.revoked_at:
            return "revoked"
        return "active" if obj.is_active else "expired"

    def has_change_permission(self, request: HttpRequest, obj: Grant | None = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Grant | None = None) -> bool:
        return False  # revoked, never deleted: the trail stays

    def save_model(self, request: HttpRequest, obj: Grant, form: Any, change: bool) -> None:
        created = self.run_service(
            request,
            lambda: services.grant_create(
                actor=request.user,
                team=obj.team,
                server=obj.server,
                tool=obj.tool,
                role=obj.role,
                expires_at=obj.expires_at,
                note=obj.note,
            ),
        )
        if created is not None:
            obj.pk = created.pk

    @admin.action(description="Revoke selected grants")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Grant]) -> Any:
        if not request.user.has_perm("teams.change_grant"):
            raise PermissionDenied
        grants = list(
            queryset.filter(revoked_at__isnull=True).select_related(
                "team", "server", "tool", "role"
            )
        )
        if "confirm" in request.POST:
            form = RevokeForm(request.POST)
            if form.is_valid():
                done = self.run_each(
                    request,
                    grants,
                    lambda grant: services.grant_revoke(
                        actor=request.user, grant=grant, reason=form.cleaned_data["reason"]
                    ),
                )
                self.message_user(request, f"Revoked {done} grant(s).", messages.SUCCESS)
                return None
        return TemplateResponse(
            request,
            "admin/teams/confirm_action.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Revoke grants",
                "items": grants,
                "form": RevokeForm(),
                "action": "revoke_selected",
                "submit_label": "Revoke",
            },
        )


class ApproveRequestForm(forms.Form):
    """Approving asks for a note and, optionally, an expiry shorter than the team wished."""

    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Kept with the decision and the grant.",
    )
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires at",
        widget=_expiry_picker(),
        help_text="Shorter than the team wished, if you like (empty: as wished).",
    )


class DenyRequestForm(forms.Form):
    """Denying needs a reason: the team reads it."""

    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": "Say why the request is denied."},
        help_text="The team sees it.",
    )


@admin.register(AccessRequest)
class AccessRequestAdmin(admin.ModelAdmin[AccessRequest]):
    change_form_template = "admin/teams/accessrequest/change_form.html"
    list_display = ["__str__", "role", "state", "wished_expires_at", "requested_by", "created_at"]
    list_filter = ["state", "team", "server"]
    list_select_related = ["team", "server", "tool", "role", "requested_by"]
    search_fields = ["team__slug", "server__slug", "tool__name", "justification"]
    actions = ["approve_selected", "deny_selected"]
    readonly_fields = (
        "team",
        "server",
        "tool",
        "role",
        "justification",
        "wished_expires_at",
        "granted_until",
        "state",
        "waiting_for",
        "requested_by",
        "created_at",
        "decided_at",
        "decided_by",
        "decision_reason",
        "grant",
    )
    fields = readonly_fields

    @admin.display(description="Decided by")
    def decided_by(self, obj: AccessRequest) -> str:
        return obj.decided_by_label or "-"

    @admin.display(description="Granted until")
    def granted_until(self, obj: AccessRequest) -> str:
        """The end the approval gave (it may be sooner than wished), beside the wished one."""
        if obj.grant is None:
            return "-"
        if obj.grant.expires_at is None:
            return "no end"
        return timezone.localtime(obj.grant.expires_at).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="Waiting for")
    def waiting_for(self, obj: AccessRequest) -> str:
        return services.access_request_waiting_for(obj) or "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # teams ask through the API

    def has_delete_permission(self, request: HttpRequest, obj: AccessRequest | None = None) -> bool:
        return False

    def change_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # Read-only: no Save (Approve and Deny stand where it would be), and a POST changes nothing.
        if request.method == "POST":
            raise PermissionDenied
        shown = {f"show_{b}": False for b in ("save", "save_and_continue", "save_and_add_another")}
        kwargs["extra_context"] = {**(kwargs.get("extra_context") or {}), **shown}
        return super().change_view(request, *args, **kwargs)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/decide/<str:decision>/",
                self.admin_site.admin_view(self.decide_view),
                name="teams_accessrequest_decide",
            ),
            *super().get_urls(),
        ]

    def decide_view(self, request: HttpRequest, object_id: str, decision: str) -> HttpResponse:
        if decision not in ("approve", "deny") or not self.has_change_permission(request):
            raise PermissionDenied
        pk = object_id_or_404(object_id)
        get_object_or_404(AccessRequest, pk=pk)
        response = self._decide(
            request,
            AccessRequest.objects.filter(pk=pk),
            approve=decision == "approve",
            bulk=False,
        )
        assert response is not None  # noqa: S101 (one by one always answers with a page)
        return response

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[AccessRequest], *, approve: bool, bulk: bool
    ) -> HttpResponse | None:
        """Ask for what the decision needs (a reason to deny; a note and expiry to approve), then
        decide. A single refused decision shows its error on the form, with what was typed."""
        pending = list(
            queryset.filter(state=AccessRequestState.PENDING).select_related(
                "team", "server", "tool", "role"
            )
        )
        form_class = ApproveRequestForm if approve else DenyRequestForm
        verb = "Approved" if approve else "Denied"
        form: forms.Form
        if "confirm" in request.POST:
            form = form_class(request.POST)
            if form.is_valid():
                data = form.cleaned_data
                text = data.get("note", "") if approve else data["reason"]
                if not bulk and len(pending) == 1:
                    try:
                        if approve:
                            services.access_request_approve(
                                actor=request.user,
                                request=pending[0],
                                expires_at=data["expires_at"],
                                note=text,
                            )
                        else:
                            services.access_request_deny(
                                actor=request.user, request=pending[0], reason=text
                            )
                    except ApplicationError as exc:
                        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                    else:
                        self.message_user(
                            request, f"{verb} the request: {pending[0]}.", messages.SUCCESS
                        )
                        return HttpResponseRedirect(reverse("admin:teams_accessrequest_changelist"))
                else:
                    result = services.access_requests_decide_bulk(
                        actor=request.user,
                        requests=pending,
                        approve=approve,
                        reason=text,
                        expires_at=data.get("expires_at"),
                    )
                    if result.done:
                        self.message_user(
                            request, f"{verb} {len(result.done)} request(s).", messages.SUCCESS
                        )
                    for item, why in result.skipped:
                        self.message_user(request, f"{item}: {why}", messages.WARNING)
                    if bulk:
                        return None
                    return HttpResponseRedirect(reverse("admin:teams_accessrequest_changelist"))
        else:
            form = form_class()
        return TemplateResponse(
            request,
            "admin/teams/confirm_action.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": ("Approve" if approve else "Deny") + " access requests",
                "items": pending,
                "form": form,
                "action": ("approve_selected" if approve else "deny_selected") if bulk else "",
                "submit_label": "Approve" if approve else "Deny",
            },
        )

    @admin.action(description="Approve selected requests", permissions=["change"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[AccessRequest]) -> Any:
        return self._decide(request, queryset, approve=True, bulk=True)

    @admin.action(description="Deny selected requests", permissions=["change"])
    def deny_selected(self, request: HttpRequest, queryset: QuerySet[AccessRequest]) -> Any:
        return self._decide(request, queryset, approve=False, bulk=True)


class AgentTokenAddForm(forms.ModelForm[AgentToken]):
    class Meta:
        model = AgentToken
        fields = ["team", "role", "name", "expires_at", "declared_servers"]
        widgets = {"expires_at": _expiry_picker()}


@admin.register(AgentToken)
class AgentTokenAdmin(ServiceAdmin[AgentToken]):
    form = AgentTokenAddForm
    list_display = ["name", "team", "role", "prefix", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["team", "role"]
    search_fields = ["name", "prefix", "team__slug"]
    actions = ["revoke_selected"]

    def has_change_permission(self, request: HttpRequest, obj: AgentToken | None = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: AgentToken | None = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        created = self.run_service(
            request,
            lambda: services.agent_token_create(
                actor=request.user,
                team=obj.team,
                role=obj.role,
                name=obj.name,
                expires_at=obj.expires_at,
                declared_servers=obj.declared_servers,
            ),
        )
        if created is None:
            return
        obj.pk = created.token.pk
        self.hand_over(request, "plain", created.plain)

    def response_add(
        self, request: HttpRequest, obj: AgentToken, post_url_continue: Any = None
    ) -> HttpResponse:
        plain = self.handed_over(request, "plain")
        if plain is None:
            return HttpResponseRedirect(request.path)
        # Shown on this page only: never put in a message (cookie or session) or a log.
        return TemplateResponse(
            request,
            "admin/teams/agenttoken/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Agent token {obj.name} created",
                "token": obj,
                "plain": plain,
            },
        )

    @admin.action(description="Revoke selected agent tokens", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> Any:
        done = self.run_each(
            request,
            queryset.filter(revoked_at__isnull=True),
            lambda token: services.agent_token_revoke(actor=request.user, token=token),
        )
        self.message_user(request, f"Revoked {done} agent token(s).", messages.SUCCESS)


@admin.register(Membership)
class MembershipAdmin(ServiceAdmin[Membership]):
    """One membership: its level and the roles the member may act as through the apps they sign
    in to (owners may act as every role). Members are added on the team's page."""

    list_display = ["user", "team", "level"]
    list_filter = ["team", "level"]
    search_fields = ["user__username", "team__slug"]
    list_select_related = ["user", "team"]
    fields = ["user", "team", "level", "roles"]
    readonly_fields = ["user", "team"]
    filter_horizontal = ["roles"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        self._team_id = obj.team_id if obj is not None else None  # its roles are the team's own
        return super().get_form(request, obj, change, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "roles":
            team_id: int = getattr(self, "_team_id", None) or 0
            kwargs["queryset"] = TeamRole.objects.filter(team_id=team_id)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        self.run_service(
            request,
            lambda: services.team_member_set(
                actor=request.user,
                team=obj.team,
                user=obj.user,
                level=obj.level,
                roles=form.cleaned_data.get("roles", []),
            ),
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """The service set the roles."""
