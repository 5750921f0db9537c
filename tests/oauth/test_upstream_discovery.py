"""Discovering a per-person server (issue 25): with the account an admin linked for it (from the
server page or `manage.py mcp link`), refreshed as a call's is; without one, the run and the
server page say that it needs one; a shared server that answers 401 naming OAuth metadata
becomes a per-person server instead of failing obscurely. Against the SDK server that is its
own authorization server (tests/mcp_servers/oauth_upstream.py)."""

from __future__ import annotations

import contextlib
from io import StringIO
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from django.core.management import CommandError, call_command
from django.test import Client as HttpClient

from registry.audit.models import AuditEvent
from registry.servers.models import DiscoveryRun, McpServer, Tool, Transport, UpstreamAuth
from registry.upstream.models import UpstreamAccount
from tests.factories import McpServerFactory, UserFactory
from tests.mcp_servers.oauth_upstream import RunningUpstream
from workers.health import check_plans, health_check_refused_again, health_plans

SLUG = "tracker"
NEEDS = "needs an admin's account to discover tools"


@pytest.fixture
def upstream():
    running = RunningUpstream()
    yield running
    running.stop()


@pytest.fixture
def admin():
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def _server(upstream: RunningUpstream, **fields: Any) -> McpServer:
    server: McpServer = McpServerFactory.create(
        slug=SLUG,
        transport=Transport.STREAMABLE_HTTP,
        url=upstream.url,
        command=[],
        **fields,
    )
    return server


def signed_in(person) -> HttpClient:
    http = HttpClient()
    http.force_login(person)
    return http


def discover(server: McpServer) -> DiscoveryRun:
    """`manage.py mcp discover --inline`: the run is recorded whether it succeeds or not."""
    with contextlib.suppress(CommandError):
        call_command("mcp", "discover", server.slug, "--inline", stdout=StringIO())
    return DiscoveryRun.objects.filter(server=server).latest("pk")


def link_for_discovery(http: HttpClient, upstream: RunningUpstream, subject: str) -> Any:
    """The URL `manage.py mcp link` prints, its button, the upstream's sign-in, the callback."""
    out = StringIO()
    call_command("mcp", "link", SLUG, "--user", "root", stdout=out)
    url = next(line for line in out.getvalue().splitlines() if line.startswith("http"))
    assert url.endswith(f"/portal/accounts/{SLUG}/link/?discovery=1")
    page = http.get(urlsplit(url).path + "?discovery=1")
    assert b"Link my account for discovery" in page.content
    started = http.post(f"/portal/accounts/{SLUG}/link/", {"discovery": "1"})
    assert started.status_code == 302, started.content
    sign_in = httpx2.get(started["Location"], follow_redirects=False)
    back = httpx2.get(f"{sign_in.headers['location']}&user={subject}", follow_redirects=False)
    callback = urlsplit(back.headers["location"])
    return http.get(f"{callback.path}?{callback.query}")


@pytest.mark.django_db
def test_without_an_admins_account_discovery_and_the_page_say_it_needs_one(upstream, admin):
    server = _server(upstream, upstream_auth=UpstreamAuth.PERSON_OAUTH)
    run = discover(server)
    assert run.status == "failed"
    assert NEEDS in run.error
    assert f"manage.py mcp link {SLUG}" in run.error
    page = signed_in(admin).get(f"/admin/servers/mcpserver/{server.pk}/change/").content.decode()
    assert "This server needs an admin's account to discover tools" in page
    assert f"href='/portal/accounts/{SLUG}/link/?discovery=1' id='link-discovery-account'" in page
    assert NEEDS.replace("'", "&#x27;") in page  # the last discovery's error, too


@pytest.mark.django_db
def test_an_admin_links_for_discovery_and_discovery_and_health_use_that_account(upstream, admin):
    server = _server(upstream, upstream_auth=UpstreamAuth.PERSON_OAUTH)
    upstream.authority.access_seconds = 30  # within the refresh margin: discovery refreshes it
    done = link_for_discovery(signed_in(admin), upstream, "root@upstream")
    upstream.authority.access_seconds = 3600
    assert done["Location"] == f"/admin/servers/mcpserver/{server.pk}/change/"
    account = UpstreamAccount.objects.get(server=server)
    assert account.for_discovery
    assert account.person == admin
    run = discover(server)
    assert run.status == "succeeded", run.error
    assert list(Tool.objects.filter(server=server).values_list("name", flat=True)) == ["whoami"]
    assert upstream.authority.refreshes == 1  # refreshed before the discovery, as a call's is
    page = signed_in(admin).get(f"/admin/servers/mcpserver/{server.pk}/change/").content.decode()
    assert "Tools are discovered and health checked with the account of <strong>root" in page
    assert "Re-link my account for discovery" in page
    # Health: a full probe with the admin's token (its tools listed), not just "asks for sign-in".
    plans = health_plans([server])
    [result] = anyio.run(lambda: check_plans(plans, concurrency=1))
    assert result.ok, result.error
    assert [tool["name"] for tool in result.tools or []] == ["whoami"]


@pytest.mark.django_db
def test_a_refused_discovery_token_is_refreshed_once_and_discovery_and_health_go_on(
    upstream, admin
):
    server = _server(upstream, upstream_auth=UpstreamAuth.PERSON_OAUTH)
    link_for_discovery(signed_in(admin), upstream, "root@upstream")
    # The provider drops the access token (not the refresh token): the server answers 401.
    upstream.authority.revoke_person("root@upstream", refresh_too=False)
    run = discover(server)
    assert run.status == "succeeded", run.error
    assert upstream.authority.refreshes == 1
    # A health check on a dropped token: refreshed once, then the tools are listed.
    upstream.authority.revoke_person("root@upstream", refresh_too=False)
    plans = health_plans([server])
    [result] = health_check_refused_again(
        plans, anyio.run(lambda: check_plans(plans, concurrency=1))
    )
    assert result.ok, result.error
    assert [tool["name"] for tool in result.tools or []] == ["whoami"]
    assert upstream.authority.refreshes == 2
    # Revoked entirely: the account breaks and the run says to re-link it.
    upstream.authority.revoke_person("root@upstream", refresh_too=True)
    run = discover(server)
    assert run.status == "failed"
    assert "re-link" in run.error
    assert UpstreamAccount.objects.get(server=server).state == "broken"


@pytest.mark.django_db
def test_only_an_admin_links_the_discovery_account(upstream):
    server = _server(upstream, upstream_auth=UpstreamAuth.PERSON_OAUTH)
    person = UserFactory(username="pat")
    answer = signed_in(person).post(f"/portal/accounts/{SLUG}/link/", {"discovery": "1"})
    assert answer.status_code == 302
    assert not answer["Location"].startswith(upstream.base)  # not sent to sign in
    assert not UpstreamAccount.objects.filter(server=server).exists()


@pytest.mark.django_db
def test_a_shared_server_that_asks_for_oauth_becomes_a_per_person_server(upstream, admin):
    server = _server(upstream)
    assert server.upstream_auth == UpstreamAuth.SHARED
    run = discover(server)
    server.refresh_from_db()
    assert server.upstream_auth == UpstreamAuth.PERSON_OAUTH
    assert run.status == "failed"
    assert "signs each person in with OAuth" in run.error
    assert f"{upstream.base}/.well-known/oauth-protected-resource" in run.error
    assert "now a per-person server" in run.error
    assert AuditEvent.objects.filter(action="server.updated", server=server).exists()
    page = signed_in(admin).get(f"/admin/servers/mcpserver/{server.pk}/change/").content.decode()
    assert "now a per-person server" in page
    assert "This server needs an admin's account to discover tools" in page


@pytest.mark.django_db
def test_a_shared_server_with_an_authorization_header_stays_shared_and_says_why(upstream):
    server = _server(upstream, headers={"Authorization": "Bearer expired"})
    run = discover(server)
    server.refresh_from_db()
    assert server.upstream_auth == UpstreamAuth.SHARED
    assert "refused the shared Authorization header" in run.error


@pytest.mark.django_db
def test_mcp_link_refuses_a_shared_server_and_an_unknown_user(upstream, admin):
    _server(upstream)
    with pytest.raises(CommandError, match="does not sign each person in"):
        call_command("mcp", "link", SLUG, stdout=StringIO())
    McpServer.objects.filter(slug=SLUG).update(upstream_auth=UpstreamAuth.PERSON_OAUTH)
    with pytest.raises(CommandError, match="No user named"):
        call_command("mcp", "link", SLUG, "--user", "nobody", stdout=StringIO())
    out = StringIO()
    UserFactory(username="pat")
    call_command("mcp", "link", SLUG, "--user", "pat", stdout=out)
    assert f"/portal/accounts/{SLUG}/link/\n" in out.getvalue()  # a person's own link
