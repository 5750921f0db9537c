"""The admin's save-through-service base (registry/core/service_admin.py): what a save hands to its
answer is shown once on that page, and a refused save goes back to the form, saving nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from registry.core.errors import ApplicationError
from registry.notifications.models import WebhookEndpoint
from registry.servers import services
from registry.servers.models import McpServer
from tests.servers.test_admin_servers import _form_data

pytestmark = pytest.mark.django_db


def test_a_new_webhooks_secret_is_shown_once_on_the_page_that_answers_the_add(
    client, alice, settings
):
    settings.TOOLROOM_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    client.force_login(alice)

    answer = client.post(
        reverse("admin:notifications_webhookendpoint_add"),
        {"url": "http://127.0.0.1:9/hook", "description": "the tests'"},
    )

    endpoint = WebhookEndpoint.objects.get()
    assert answer.status_code == 200
    assert answer.context["secret"]
    assert answer.context["secret"] in answer.content.decode()
    assert (
        answer.context["secret"]
        not in client.get(
            reverse("admin:notifications_webhookendpoint_changelist")
        ).content.decode()
    )
    assert endpoint.url == "http://127.0.0.1:9/hook"


def test_a_save_the_service_refuses_goes_back_to_the_form_and_saves_nothing(
    client, alice, monkeypatch
):
    def refuse(**_fields):
        raise ApplicationError("Refused by the service for this test.")

    monkeypatch.setattr(services, "server_create", refuse)
    client.force_login(alice)

    answer = client.post(reverse("admin:servers_mcpserver_add"), _form_data(), follow=True)

    assert answer.redirect_chain == [(reverse("admin:servers_mcpserver_add"), 302)]
    assert "Refused by the service for this test." in answer.content.decode()
    assert "was added successfully" not in answer.content.decode()
    assert not McpServer.objects.exists()


def test_a_bulk_action_goes_on_past_a_refusal_and_counts_what_went_through(rf):
    from django.contrib import admin
    from django.contrib.messages.storage.fallback import FallbackStorage

    from registry.core.service_admin import ServiceAdmin
    from registry.teams.models import Team

    request = rf.post("/")
    request.session = {}
    request._messages = FallbackStorage(request)
    called = []

    def revoke(number):
        called.append(number)
        if number == 2:
            raise ApplicationError("Two is already revoked.")

    done = ServiceAdmin(Team, admin.site).run_each(request, [1, 2, 3], revoke)

    assert (done, called) == (2, [1, 2, 3])
    assert [str(message) for message in request._messages] == ["Two is already revoked."]
