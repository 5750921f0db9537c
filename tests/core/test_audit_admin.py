"""The audit trail's admin pages: listed and searchable, never added to, changed or deleted."""

from __future__ import annotations

import pytest
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers import services
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db


def test_the_audit_trail_lists_and_finds_events_and_is_read_only(client, alice):
    server = McpServerFactory(name="Clock")
    services.server_submit_for_review(actor=alice, server=server)
    McpServerFactory(name="Other")
    events = list(AuditEvent.objects.filter(server=server))
    assert events
    event = events[0]
    client.force_login(alice)

    listed = client.get(reverse("admin:audit_auditevent_changelist"), {"q": "Clock"})
    page = client.get(reverse("admin:audit_auditevent_change", args=[event.pk]))

    assert listed.status_code == 200
    found = {row.pk for row in listed.context["cl"].result_list}
    assert found == {each.pk for each in events}
    assert "alice" in listed.content.decode()
    assert page.status_code == 200
    assert client.get(reverse("admin:audit_auditevent_add")).status_code == 403
    assert client.post(reverse("admin:audit_auditevent_delete", args=[event.pk])).status_code == 403
