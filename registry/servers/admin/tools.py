"""The vetting workplace's tool pages: approval, revocation, permission classes, findings."""

from __future__ import annotations

import copy
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Lower
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.audit.models import AuditEvent
from registry.core.admin_ids import object_id_or_404
from registry.core.canonical import pretty_json
from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.admin.bulk_approval import (
    CHANGED_MEANWHILE,
    FLAGGED,
    BulkPlan,
    summary_line,
)
from registry.servers.admin.common import review_badge
from registry.servers.admin.forms import (
    PermissionClassForm,
    ToolApprovalForm,
    ToolRevokeForm,
)
from registry.servers.models import (
    ApprovalState,
    Tool,
    ToolApproval,
)
from registry.servers.selectors import (
    TOOL_REVIEW_STATES,
    tool_definition_diff,
    tool_review_filter,
    tool_review_state,
    tools_with_review_history,
)
from registry.servers.templatetags.hidden_text import show_hidden


class RemovedFilter(admin.SimpleListFilter):
    title = "offered"
    parameter_name = "removed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("present", "Still offered"), ("removed", "Removed by the server")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "present":
            return queryset.filter(removed_at__isnull=True)
        if self.value() == "removed":
            return queryset.filter(removed_at__isnull=False)
        return queryset


class ReviewStateFilter(admin.SimpleListFilter):
    """Where tools stand in review; the review queue's counts link to exactly these rows."""

    title = "review"
    parameter_name = "review"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("awaiting", "Awaiting approval (any)"), *TOOL_REVIEW_STATES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in TOOL_REVIEW_STATES or value == "awaiting":
            return queryset.filter(tool_review_filter(value))
        return queryset


class FindingsFilter(admin.SimpleListFilter):
    title = "scanner findings"
    parameter_name = "findings"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Has findings"), ("no", "No findings")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.exclude(findings=[])
        if self.value() == "no":
            return queryset.filter(findings=[])
        return queryset


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin[Tool]):
    change_form_template = "admin/servers/tool/change_form.html"
    # What fits a 1366 px screen beside the filters; the hash and dates are on the tool's page.
    list_display = ["tool_name", "server", "approval_badge", "findings_count", "permission", "seen"]
    ordering = [Lower("server__name"), Lower("name"), "pk"]  # type: ignore[list-item]
    list_filter = [
        ReviewStateFilter,
        "approval_state",
        "permission_class",
        RemovedFilter,
        FindingsFilter,
        "server__review_status",
        "server",
    ]
    search_fields = ["name", "title", "description", "server__name", "server__slug"]
    list_select_related = ["server"]
    actions = ["approve_selected", "revoke_selected"]
    readonly_fields = (
        "server",
        "name_shown",
        "title_shown",
        "description_shown",
        "definition_hash",
        "class_from_annotations",
        "permission_class",
        "review_state",
        "first_seen_at",
        "last_seen_at",
        "removed_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tools come from discovery

    def has_delete_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        return False  # a tool's history is evidence

    def has_change_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        return False  # decisions have their own forms below

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tool]:
        return tools_with_review_history(super().get_queryset(request))

    # What the tool shows the model, with hidden characters (tag characters, zero-width and
    # bidirectional controls) marked: as plain text they would not show.
    @admin.display(description="Name")
    def name_shown(self, obj: Tool) -> SafeString:
        return show_hidden(obj.name)

    @admin.display(description="Title")
    def title_shown(self, obj: Tool) -> SafeString:
        return show_hidden(obj.title)

    @admin.display(description="Description")
    def description_shown(self, obj: Tool) -> SafeString:
        return show_hidden(obj.description)

    @admin.display(description="Review", ordering="approval_state")
    def approval_badge(self, obj: Tool) -> SafeString:
        return review_badge(tool_review_state(tool=obj))

    @admin.display(description="Findings")
    def findings_count(self, obj: Tool) -> SafeString | int:
        if not obj.findings:
            return 0
        return format_html('<strong style="color:#b42318">{}</strong>', len(obj.findings))

    @admin.display(description="Class from annotations")
    def class_from_annotations(self, obj: Tool) -> str:
        return obj.get_permission_class_derived_display()

    @admin.display(description="Review")
    def review_state(self, obj: Tool) -> SafeString:
        return review_badge(tool_review_state(tool=obj))

    @admin.display(description="Name", ordering=Lower("name"))
    def tool_name(self, obj: Tool) -> str:
        return obj.name

    @admin.display(description="Class", ordering="permission_class")
    def permission(self, obj: Tool) -> str:
        return obj.get_permission_class_display()

    @admin.display(description="Last seen", ordering="last_seen_at")
    def seen(self, obj: Tool) -> str:
        return obj.last_seen_at.astimezone(timezone.get_current_timezone()).strftime("%Y-%m-%d")

    @admin.display(description="Hash")
    def short_hash(self, obj: Tool) -> SafeString:
        return format_html("<code>{}</code>", obj.definition_hash[:12])

    @admin.display(description="Offered", boolean=True)
    def offered(self, obj: Tool) -> bool:
        return obj.removed_at is None

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        tool = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if tool is not None:
            context = {**self._tool_page_context(request, tool), **context}
        return super().change_view(request, object_id, form_url, context)

    def _tool_page_context(self, request: HttpRequest, tool: Tool) -> dict[str, Any]:
        can_approve = request.user.has_perm("servers.approve_tool")
        return {
            "tool": tool,
            "tool_state_label": self._state_label(tool),
            "definition_json": pretty_json(tool.definition),
            "definition_diff": tool_definition_diff(tool=tool),
            "approvals": list(ToolApproval.objects.filter(tool=tool)[:50]),
            "can_approve": can_approve and not tool.is_approved and tool.removed_at is None,
            "can_revoke": can_approve and tool.approval_state == ApprovalState.APPROVED,
            "approval_form": ToolApprovalForm(initial={"expected_hash": tool.definition_hash}),
            "revoke_form": ToolRevokeForm(),
            "permission_form": PermissionClassForm(
                initial={"permission_class": tool.permission_class_override}
            ),
            "audit_events": list(
                AuditEvent.objects.filter(target_type="tool", target_id=str(tool.pk))[:50]
            ),
        }

    @staticmethod
    def _state_label(tool: Tool) -> str:
        if tool.is_approved:
            return f"Approved at definition {tool.approved_definition_hash[:12]}"
        return tool_review_state(tool=tool).label

    def _tool_page_refused(self, request: HttpRequest, tool: Tool, **forms: Any) -> HttpResponse:
        """The tool page again, with the refused decision's form showing its error and input.

        Rendered as the page's GET: the change form itself is read-only and refuses a POST.
        """
        page_request = copy.copy(request)
        page_request.method = "GET"
        return self.change_view(page_request, str(tool.pk), extra_context=forms)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "<path:object_id>/approve/",
                self.admin_site.admin_view(self.approve_view),
                name="{}_{}_approve".format(*info),
            ),
            path(
                "<path:object_id>/revoke/",
                self.admin_site.admin_view(self.revoke_view),
                name="{}_{}_revoke".format(*info),
            ),
            path(
                "<path:object_id>/permission-class/",
                self.admin_site.admin_view(self.permission_class_view),
                name="{}_{}_permission_class".format(*info),
            ),
            *super().get_urls(),
        ]

    def _tool_for_decision(self, request: HttpRequest, object_id: str) -> Tool:
        if request.method != "POST" or not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        return get_object_or_404(Tool, pk=object_id_or_404(object_id))

    def _back(self, tool: Tool) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:servers_tool_change", args=[tool.pk]))

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = ToolApprovalForm(request.POST)
        if form.is_valid():
            try:
                services.tool_approve(
                    actor=request.user,
                    tool=tool,
                    note=form.cleaned_data["note"],
                    acknowledge_findings=form.cleaned_data["acknowledge_findings"],
                    expected_hash=form.cleaned_data["expected_hash"],
                )
            except ApplicationError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                self.message_user(
                    request, f"Approved {tool} at its current definition.", messages.SUCCESS
                )
                return self._back(tool)
        tool.refresh_from_db()
        # The page shows the definition as it is now: approving again approves that one.
        data = request.POST.copy()
        data["expected_hash"] = tool.definition_hash
        refused = ToolApprovalForm(data)
        refused.is_valid()
        for field_name, errors in form.errors.items():
            for error in errors:
                refused.add_error(field_name if field_name in refused.fields else None, error)
        return self._tool_page_refused(request, tool, approval_form=refused)

    def revoke_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = ToolRevokeForm(request.POST)
        if form.is_valid():
            try:
                services.tool_revoke(
                    actor=request.user, tool=tool, reason=form.cleaned_data["reason"]
                )
            except ApplicationError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                self.message_user(request, f"Revoked the approval of {tool}.", messages.SUCCESS)
                return self._back(tool)
        tool.refresh_from_db()
        return self._tool_page_refused(request, tool, revoke_form=form)

    def permission_class_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = PermissionClassForm(request.POST)
        try:
            if not form.is_valid():
                raise ApplicationError("Choose a permission class.")
            updated = services.tool_set_permission_class(
                actor=request.user,
                tool=tool,
                permission_class=form.cleaned_data["permission_class"],
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(
                request, f"{updated} is a {updated.permission_class} tool now.", messages.SUCCESS
            )
        return self._back(tool)

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("servers.approve_tool")

    @admin.action(
        description="Approve selected tools at their current definitions", permissions=["approve"]
    )
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> Any:
        """Confirm first (the tools, their hashes, a note), then approve each at the hash shown."""
        if not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        tools = list(queryset.select_related("server").order_by(Lower("name"), "pk"))
        plan = BulkPlan.of(tools)
        if "confirm" in request.POST:
            shown = {
                tool.pk: request.POST.get(f"hash_{tool.pk}", "")
                for tool in plan.approvable
                if f"hash_{tool.pk}" in request.POST
            }
            result = services.tools_approve_bulk(
                actor=request.user,
                tools=plan.approvable,
                note=request.POST.get("note", "").strip(),
                expected_hashes=shown,
            )
            skipped = plan.skipped + [(tool, CHANGED_MEANWHILE) for tool, _ in result.skipped]
            line = summary_line("Approved", len(result.approved), len(tools), skipped)
            level = messages.SUCCESS if result.approved and not skipped else messages.WARNING
            self.message_user(request, f"{line}.", level)
            flagged = [str(tool) for tool, reason in plan.skipped if reason == FLAGGED]
            if flagged:
                self.message_user(
                    request,
                    f"Flagged by the scanner, approve each on its own page: {', '.join(flagged)}.",
                    messages.WARNING,
                )
            for tool, reason in result.skipped:
                self.message_user(request, f"Not approved: {tool}: {reason}", messages.WARNING)
            return None  # back to the list, at the address (filters) it was called from
        return TemplateResponse(
            request,
            "admin/servers/tools_bulk_approve.html",
            {
                **self.admin_site.each_context(request),
                "title": plan.summary(),
                "opts": self.opts,
                "plan": plan,
                "back": request.get_full_path(),
            },
        )

    @admin.action(description="Revoke the approval of selected tools", permissions=["approve"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> Any:
        if not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        if "confirm" in request.POST:
            form = ToolRevokeForm(request.POST)
            if form.is_valid():
                revoked = 0
                for tool in queryset:
                    try:
                        services.tool_revoke(
                            actor=request.user, tool=tool, reason=form.cleaned_data["reason"]
                        )
                    except ApplicationError as exc:
                        self.message_user(request, exc.message, messages.WARNING)
                    else:
                        revoked += 1
                if revoked:
                    self.message_user(request, f"Revoked {revoked} approval(s).", messages.SUCCESS)
                return None
        else:
            form = ToolRevokeForm()
        return TemplateResponse(
            request,
            "admin/servers/tool_revoke.html",
            {
                **self.admin_site.each_context(request),
                "title": "Revoke tool approvals",
                "opts": self.opts,
                "tools": list(queryset.select_related("server")),
                "form": form,
            },
        )
