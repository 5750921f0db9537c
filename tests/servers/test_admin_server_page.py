"""The server page stays one page of work as a server grows: its query count is pinned."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from registry.servers.models import ReviewStatus
from registry.servers.vetting import tool_sync
from tests.factories import McpServerFactory, tool_definition

pytestmark = pytest.mark.django_db

# Measured: session and user, the server (twice: the page and the admin form), its status, the
# tools page and its count, the waiting count, resources, prompts, discoveries, health, uptime,
# audit, the form's choices, the gateway policy, the storage volumes (and, with storage, its
# archives). What matters is that it does not grow with the tools.
SERVER_PAGE_QUERIES = 19


def _server_with_tools(count: int):
    server = McpServerFactory(review_status=ReviewStatus.APPROVED)
    tool_sync.server_tools_sync(
        server=server, tools=[tool_definition(f"tool_{n:03}") for n in range(count)]
    )
    return server


def _queries_for_page(client, server, **params):
    url = reverse("admin:servers_mcpserver_change", args=[server.pk])
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params)
    assert response.status_code == 200
    return len(queries), response


def test_the_server_page_costs_the_same_queries_with_500_tools_as_with_5(client, alice):
    client.force_login(alice)
    small, large = _server_with_tools(5), _server_with_tools(500)
    _queries_for_page(client, small)  # warm the session and content types

    with_5, _ = _queries_for_page(client, small)
    with_500, response = _queries_for_page(client, large)

    assert with_500 == with_5 == SERVER_PAGE_QUERIES
    html = response.content.decode()
    assert html.count('name="tool"') == 50  # one page of tools
    assert "Tools 1 to 50 of 500" in html


def test_the_next_page_of_tools_shows_the_next_50(client, alice):
    client.force_login(alice)
    server = _server_with_tools(120)

    _, response = _queries_for_page(client, server, tools_page=3)

    html = response.content.decode()
    assert "Tools 101 to 120 of 120" in html
    assert "tool_100" in html
    assert "tool_099" not in html
