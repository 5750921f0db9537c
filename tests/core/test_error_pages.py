"""The server error page renders without a request or context, in the admin's look."""

from __future__ import annotations

from django.test import RequestFactory
from django.views.defaults import server_error


def test_the_server_error_page_has_the_admin_look_and_a_way_back():
    response = server_error(RequestFactory().get("/admin/servers/tool/1/change/"))

    html = response.content.decode()
    assert response.status_code == 500
    assert "Server error (500)" in html
    assert "admin/css/base.css" in html
    assert 'href="/admin/"' in html
    assert 'href="/admin/servers/mcpserver/fleet/"' in html
