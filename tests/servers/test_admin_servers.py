"""The server pages of the vetting workplace: list, form, secrets, review decisions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers import services
from registry.servers.models import McpServer, ReviewStatus, Transport
from registry.servers.policy import TrustTier
from tests.catalogue_helpers import visibility_changes
from tests.factories import McpServerFactory, ToolFactory, UserFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:servers_mcpserver_changelist"


def _changelist_queries(client, count: int) -> int:
    for _ in range(count - McpServer.objects.count()):
        server = McpServerFactory()
        ToolFactory.create_batch(2, server=server)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    return len(ctx.captured_queries)


def test_the_changelist_query_count_does_not_grow_with_100_servers(client, alice):
    client.force_login(alice)
    with_ten = _changelist_queries(client, 10)
    with_hundred = _changelist_queries(client, 100)
    assert with_hundred == with_ten
    assert with_hundred <= 12


def test_the_changelist_shows_tool_counts(client, alice):
    server = McpServerFactory(name="Clock", review_status=ReviewStatus.APPROVED)
    approved, _awaiting = ToolFactory(server=server), ToolFactory(server=server)
    services.tool_approve(actor=alice, tool=approved)
    ToolFactory(server=McpServerFactory(name="Clock draft"))
    client.force_login(alice)

    response = client.get(reverse(CHANGELIST), {"q": "Clock"})

    rows = {row.name: row for row in response.context["cl"].result_list}
    row = rows["Clock"]
    assert (row.tools_total, row.tools_approved, row.tools_awaiting) == (2, 1, 1)
    # A draft's tools are not awaited yet (the fleet page and the review queue count the same).
    draft = rows["Clock draft"]
    assert (draft.tools_total, draft.tools_awaiting) == (1, None)


def _form_data(**overrides):
    data = {
        "name": "Weather",
        "slug": "weather",
        "description": "",
        "category": "",
        "version": "",
        "homepage_url": "",
        "repository_url": "",
        "transport": Transport.STDIO,
        "command": "uvx\nmcp-weather==1.2.0",
        "working_directory": "",
        "url": "",
        "env_text": "",
        "headers_text": "",
        "package_registry": "",
        "package_identifier": "",
        "package_version": "",
        "image": "",
        "trust_tier": TrustTier.COMMUNITY,
        "data_sensitivity": "internal",
        "isolation": "sandbox",
        "network_mode": "none",
        "egress_allowlist": "",
        "memory_limit_mb": "",
        "cpu_limit": "",
        "pids_limit": "",
        "health_check_method": "tools_list",
        "health_check_tool": "",
        "health_check_arguments": "{}",
        "health_check_interval_seconds": "60",
        "health_check_timeout_seconds": "10",
        "health_failure_threshold": "3",
        "restart_policy": "on_failure",
        "restart_max_attempts": "3",
    }
    data.update(overrides)
    return data


def test_it_registers_a_server_through_the_service(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_add"),
        _form_data(env_text="API_KEY=sk-live-0123456789abcdef\nREGION=eu"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    server = McpServer.objects.get(slug="weather")
    assert server.command == ["uvx", "mcp-weather==1.2.0"]
    assert server.env == {"API_KEY": "sk-live-0123456789abcdef", "REGION": "eu"}
    assert server.review_status == ReviewStatus.DRAFT
    assert hasattr(server, "status")
    event = AuditEvent.objects.get(action="server.created")
    assert event.actor == alice
    assert "sk-live" not in str(event.after)


def test_it_refuses_a_command_given_as_one_shell_string(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_add"), _form_data(command="npx -y @scope/server /tmp")
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "shell command line" in errors["command"][0]
    assert not McpServer.objects.exists()


def test_it_refuses_a_policy_looser_than_the_tier(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_add"),
        _form_data(trust_tier=TrustTier.UNTRUSTED, isolation="local", network_mode="bridge"),
    )
    errors = response.context["adminform"].form.errors
    assert "never looser" in errors["isolation"][0]
    assert "looser than" in errors["network_mode"][0]
    assert not McpServer.objects.exists()


def test_the_server_page_never_shows_a_secret_back(client, alice):
    server = McpServerFactory(env={"API_KEY": "sk-live-0123456789abcdef", "PIN": "1234"})
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()

    assert "sk-live-0123456789abcdef" not in page
    assert "1234" not in page.replace(str(server.pk), "")
    assert "API_KEY=••••••••\n" in page or "API_KEY=••••••••<" in page
    assert "cdef" not in page


def test_saving_the_form_with_masked_values_keeps_the_secrets(client, alice):
    server = McpServerFactory(
        slug="weather",
        trust_tier=TrustTier.COMMUNITY,
        isolation="sandbox",
        command=["uvx", "mcp-weather==1.2.0"],
        env={"API_KEY": "sk-live-0123456789abcdef"},
    )
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    shown_env = page.context["adminform"].form["env_text"].value()

    response = client.post(
        reverse("admin:servers_mcpserver_change", args=[server.pk]),
        _form_data(env_text=shown_env + "\nNEW=1", description="now described"),
    )

    assert response.status_code == 302
    server.refresh_from_db()
    assert server.env == {"API_KEY": "sk-live-0123456789abcdef", "NEW": "1"}
    assert server.description == "now described"
    event = AuditEvent.objects.get(action="server.updated")
    assert event.after["env"] == ["API_KEY", "NEW"]


def test_the_secrets_are_encrypted_at_rest():
    server = McpServerFactory(env={"API_KEY": "sk-live-0123456789abcdef"})
    with connection.cursor() as cursor:
        cursor.execute("SELECT env FROM servers_mcpserver WHERE id = %s", [server.pk])
        stored = cursor.fetchone()[0]
    assert "sk-live" not in stored
    assert "API_KEY" not in stored


def test_a_reviewer_walks_a_server_from_draft_to_suspended(client, bob):
    server = McpServerFactory(trust_tier=TrustTier.BUILTIN)
    client.force_login(bob)

    def decide(action, reason=""):
        url = reverse("admin:servers_mcpserver_decide", args=[server.pk, action])
        assert client.get(url).status_code == 200
        return client.post(url, {"reason": reason, "confirm": "1"})

    decide("submit")
    decide("approve")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.APPROVED

    response = decide("suspend")  # no reason: refused
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.APPROVED
    # Refused on the form itself, which stays on the page.
    assert "Give a reason" in str(response.context["form"].errors["reason"])

    decide("suspend", "leaks tokens in its logs")
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.SUSPENDED
    assert server.review_note == "leaks tokens in its logs"
    assert list(
        AuditEvent.objects.filter(server=server).order_by("id").values_list("action", flat=True)
    ) == ["server.pending_review", "server.approved", "server.suspended"]


def test_the_page_offers_only_the_decisions_the_status_allows(client, bob):
    server = McpServerFactory()
    client.force_login(bob)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    assert [action for action, _ in page.context["server_decisions"]] == ["submit", "retire"]


def test_bulk_approval_applies_the_tier_rules_to_each_server(client, bob):
    builtin = McpServerFactory(trust_tier=TrustTier.BUILTIN, review_status="pending_review")
    community = McpServerFactory(
        trust_tier=TrustTier.COMMUNITY, isolation="sandbox", review_status="pending_review"
    )
    client.force_login(bob)

    client.post(
        reverse(CHANGELIST),
        {
            "action": "approve_selected",
            "_selected_action": [builtin.pk, community.pk],
            "confirm": "1",
            "reason": "",
        },
    )

    builtin.refresh_from_db()
    community.refresh_from_db()
    assert builtin.review_status == ReviewStatus.APPROVED
    assert community.review_status == ReviewStatus.PENDING_REVIEW  # needs a written note


def test_staff_without_the_review_permission_cannot_decide(client):
    dave = UserFactory(username="dave", is_staff=True)
    dave.user_permissions.add(Permission.objects.get(codename="view_mcpserver"))
    server = McpServerFactory()
    client.force_login(dave)

    response = client.post(
        reverse("admin:servers_mcpserver_decide", args=[server.pk, "submit"]), {"confirm": "1"}
    )

    assert response.status_code == 403
    server.refresh_from_db()
    assert server.review_status == ReviewStatus.DRAFT


def test_people_without_admin_access_are_sent_to_log_in(client, charlie):
    client.force_login(charlie)
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_renaming_a_category_is_audited_and_reaches_the_catalogues(
    client, alice, django_capture_on_commit_callbacks
):
    from registry.servers.models import Category

    client.force_login(alice)
    client.post(
        reverse("admin:servers_category_add"), {"slug": "dev", "name": "Dev", "description": ""}
    )
    category = Category.objects.get(slug="dev")
    server = McpServerFactory(category=category)
    with visibility_changes() as received, django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("admin:servers_category_change", args=[category.pk]),
            {"name": "Developer tools", "description": "Git and friends."},
        )

    category.refresh_from_db()
    assert (category.slug, category.name) == ("dev", "Developer tools")
    assert received == [([server.pk], "category.updated")]
    assert list(
        AuditEvent.objects.filter(target_type="category")
        .values_list("action", flat=True)
        .order_by("id")
    ) == ["category.created", "category.updated"]
