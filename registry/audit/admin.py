"""The audit trail in the Django admin: read-only, newest first, searchable."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.core.admin_export import CSV_CHANGE_LIST_TEMPLATE, CsvExportMixin


@admin.register(AuditEvent)
class AuditEventAdmin(CsvExportMixin, admin.ModelAdmin[AuditEvent]):
    change_list_template = CSV_CHANGE_LIST_TEMPLATE
    csv_columns = [
        ("created_at", "created_at"),
        ("actor", "actor_label"),
        ("action", "action"),
        ("target_type", "target_type"),
        ("target_id", "target_id"),
        ("target", "target_repr"),
        ("server", lambda event: event.server.slug if event.server else ""),
        ("summary", "summary"),
    ]
    # Short columns, so the summary (what happened, in words) keeps its room at 1366 px.
    list_display = ["when", "who", "action", "target", "summary"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_label", "action", "target_repr", "summary"]
    list_select_related = ["server"]
    date_hierarchy = "created_at"

    @admin.display(description="When", ordering="created_at")
    def when(self, obj: AuditEvent) -> str:
        return obj.created_at.astimezone(timezone.get_current_timezone()).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="Who", ordering="actor_label")
    def who(self, obj: AuditEvent) -> str:
        return obj.actor_label

    @admin.display(description="Target", ordering="target_repr")
    def target(self, obj: AuditEvent) -> str:
        return obj.target_repr

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False
