"""Reading the audit trail."""

from __future__ import annotations

from django.db.models import QuerySet

from registry.audit.models import AuditEvent


def audit_events_for_server(*, server_id: int, limit: int = 50) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(server_id=server_id).order_by("-created_at", "-id")[:limit]
