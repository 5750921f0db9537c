"""Operating servers from the admin: discover, check, start/stop, and the fleet status page."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from registry.servers import services
from registry.servers.jobs.health import HealthResult, health_record
from registry.servers.models import DiscoveryRun, HealthSample, McpServer, Tool
from registry.servers.vetting import tool_sync
from tests.factories import McpServerFactory, tool_definition

pytestmark = pytest.mark.django_db


def _queue_length(queue: str) -> int:
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    return redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(f"{prefix}{queue}")


def _operate(client, server, operation):
    return client.post(reverse("admin:servers_mcpserver_operate", args=[server.pk, operation]))


def test_discover_now_queues_a_run_on_the_real_broker(
    client, bob, django_capture_on_commit_callbacks
):
    server = McpServerFactory()
    client.force_login(bob)
    before = _queue_length("discovery")

    with django_capture_on_commit_callbacks(execute=True):
        response = _operate(client, server, "discover")

    assert response.status_code == 302
    run = DiscoveryRun.objects.get(server=server, trigger="admin")
    assert run.status == "queued"
    assert run.requested_by == "bob"
    assert _queue_length("discovery") == before + 1


def test_operations_need_a_post_and_the_change_permission(client, charlie):
    server = McpServerFactory()
    client.force_login(charlie)
    assert _operate(client, server, "discover").status_code == 302  # to the login page
    assert not DiscoveryRun.objects.filter(trigger="admin").exists()


def test_only_approved_servers_can_be_started(client, bob):
    server = McpServerFactory(review_status="draft")
    client.force_login(bob)

    response = client.post(
        reverse("admin:servers_mcpserver_operate", args=[server.pk, "start"]), follow=True
    )

    assert "only approved servers run as warm runtimes" in response.content.decode()
    assert not McpServer.objects.get(pk=server.pk).auto_start


def test_starting_and_stopping_set_the_wish_and_audit_it(client, bob):
    server = McpServerFactory(review_status="approved")
    client.force_login(bob)

    _operate(client, server, "start")
    assert McpServer.objects.get(pk=server.pk).auto_start
    _operate(client, server, "stop")
    assert not McpServer.objects.get(pk=server.pk).auto_start
    assert list(server.audit_events.values_list("action", flat=True).order_by("id")) == [
        "server.runtime_start_requested",
        "server.runtime_stop_requested",
    ]


def test_the_bulk_action_checks_health_of_every_selected_server(client, bob):
    servers = [McpServerFactory(review_status="approved") for _ in range(3)]
    client.force_login(bob)

    client.post(
        reverse("admin:servers_mcpserver_changelist"),
        {
            "action": "check_health_selected",
            "_selected_action": [s.pk for s in servers],
        },
    )

    for server in servers:
        assert server.audit_events.filter(action="server.health_check_requested").exists()


def test_the_server_page_shows_health_history_uptime_and_the_vetting_report(client, alice):
    server = McpServerFactory(review_status="approved")
    health_record(results=[HealthResult(server.pk, ok=True, latency_ms=20)])
    health_record(results=[HealthResult(server.pk, ok=False, error="connection refused")])
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))

    content = page.content.decode()
    assert page.context["uptime_24h"].percent == 50.0
    assert "connection refused" in content
    assert [op for op, _ in page.context["server_operations"]] == ["discover", "check", "start"]


def test_the_fleet_page_shows_counts_offenders_and_changed_tools(client, alice):
    healthy = McpServerFactory(review_status="approved", health_failure_threshold=1)
    broken = McpServerFactory(review_status="approved", health_failure_threshold=1, name="Flaky")
    health_record(
        results=[
            HealthResult(healthy.pk, ok=True, latency_ms=5),
            HealthResult(broken.pk, ok=False, error="timed out"),
        ]
    )
    tool_sync.server_tools_sync(server=healthy, tools=[tool_definition("search")])
    search = Tool.objects.get(name="search")
    services.tool_approve(actor=alice, tool=search)
    tool_sync.server_tools_sync(
        server=healthy, tools=[tool_definition("search", description="now different")]
    )
    HealthSample.objects.create(server=broken, checked_at=timezone.now(), ok=False)
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_fleet"))

    counts = {label: count for label, count, _ in page.context["health_counts"]}
    assert counts["Healthy"] == 1
    assert counts["Unhealthy"] == 1
    assert [row["server"].name for row in page.context["offenders"]] == ["Flaky"]
    assert [tool.name for tool in page.context["changed_tools"]] == ["search"]
