"""The discovery status endpoint the server page polls after "Discover now" (issue 28)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from registry.servers.models import DiscoveryRun, DiscoveryStatus
from tests.factories import McpServerFactory, UserFactory

pytestmark = pytest.mark.django_db


def _status_url(run):
    return reverse("admin:servers_mcpserver_discovery_status", args=[run.server_id, run.pk])


def test_discover_now_sends_the_page_to_follow_the_run_it_asked_for(client, alice):
    server = McpServerFactory()
    client.force_login(alice)

    response = client.post(reverse("admin:servers_mcpserver_operate", args=[server.pk, "discover"]))

    run = DiscoveryRun.objects.get(server=server)
    page = reverse("admin:servers_mcpserver_change", args=[server.pk])
    assert response["Location"] == f"{page}?discovery={run.pk}"
    shown = client.get(response["Location"])
    assert shown.context["discovery_progress"] == run
    html = shown.content.decode()
    assert 'id="discovery-progress"' in html
    assert 'data-finished="false"' in html
    assert f'data-status-url="{_status_url(run)}"' in html
    assert "/static/servers/discovery_progress.js" in html


@pytest.mark.parametrize(
    ("status", "label", "finished"),
    [
        (DiscoveryStatus.QUEUED, "Queued", False),
        (DiscoveryStatus.RUNNING, "Running", False),
        (DiscoveryStatus.SUCCEEDED, "Succeeded", True),
        (DiscoveryStatus.FAILED, "Failed", True),
    ],
)
def test_the_endpoint_says_the_runs_state(client, alice, status, label, finished):
    run = DiscoveryRun.objects.create(
        server=McpServerFactory(),
        trigger="admin",
        requested_by="alice",
        status=status,
        error="it exited with status 1" if status == DiscoveryStatus.FAILED else "",
        summary={"counts": {"tools": 3}} if status == DiscoveryStatus.SUCCEEDED else {},
    )
    client.force_login(alice)

    response = client.get(_status_url(run))

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    data = response.json()
    assert (data["run"], data["status"], data["label"], data["finished"]) == (
        run.pk,
        status,
        label,
        finished,
    )
    if status == DiscoveryStatus.SUCCEEDED:
        assert data["tools"] == 3
    if status == DiscoveryStatus.FAILED:
        assert data["error"] == "it exited with status 1"


def test_the_endpoint_is_for_staff_who_may_view_servers_only(client, charlie):
    run = DiscoveryRun.objects.create(server=McpServerFactory(), trigger="admin")
    url = _status_url(run)

    assert client.get(url).status_code == 302  # signed out: the login page
    client.force_login(charlie)
    response = client.get(url)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
    client.force_login(UserFactory(username="staff-without-perms", is_staff=True))
    assert client.get(url).status_code == 403


def test_a_run_of_another_server_is_not_found(client, alice):
    run = DiscoveryRun.objects.create(server=McpServerFactory(), trigger="admin")
    other = McpServerFactory()
    client.force_login(alice)

    url = reverse("admin:servers_mcpserver_discovery_status", args=[other.pk, run.pk])

    assert client.get(url).status_code == 404
