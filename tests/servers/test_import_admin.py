"""The admin's import page: upload, read the plan, confirm; permissions for each persona."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers.models import Category, McpServer
from registry.servers.policy import TrustTier
from tests.factories import CategoryFactory, McpServerFactory, UserFactory

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"
GITHUB_TOKEN = "ghp_Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5eU0i"
URL = "admin:servers_mcpserver_import"


def _upload(name, content=None):
    return SimpleUploadedFile(name, content if content is not None else (DATA / name).read_bytes())


def _check(client, name, content=None, **fields):
    data = {"file": _upload(name, content), "format": "auto", "tier": "", "category": ""}
    data.update(fields)
    return client.post(reverse(URL), data)


def _token(response):
    match = re.search(r'name="token" value="([^"]+)"', response.content.decode())
    assert match is not None
    return match[1]


def _confirm(client, token):
    return client.post(reverse(URL), {"token": token})


@pytest.fixture
def dave(db):
    """Staff who may add servers but not change them."""
    user = UserFactory(username="dave", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="servers", codename__in=["add_mcpserver", "view_mcpserver"]
        )
    )
    return user


def test_it_shows_the_upload_form_with_every_tier_to_a_superuser(client, alice):
    client.force_login(alice)

    response = client.get(reverse(URL))

    assert response.status_code == 200
    assert b'type="file"' in response.content
    assert b'<option value="builtin">Builtin</option>' in response.content


def test_it_offers_only_untrusted_to_staff_who_may_not_vouch(client, bob):
    client.force_login(bob)

    response = client.get(reverse(URL))

    assert b'value="builtin"' not in response.content
    assert b'<option value="untrusted">Untrusted</option>' in response.content


def test_it_sends_a_user_without_admin_access_to_the_login_page(client, charlie):
    client.force_login(charlie)

    response = client.get(reverse(URL))

    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_it_refuses_staff_without_the_add_permission(client):
    client.force_login(UserFactory(username="erin", is_staff=True))

    assert client.get(reverse(URL)).status_code == 403


def test_it_shows_the_plan_and_writes_nothing_when_a_file_is_checked(client, alice):
    client.force_login(alice)

    response = _check(client, "claude_desktop_config.json")

    assert response.status_code == 200
    assert b"Servers: 3 to create, 0 to update, 0 unchanged." in response.content
    assert b'name="token"' in response.content
    assert McpServer.objects.count() == 0


def test_it_never_shows_a_secret_from_the_file_in_the_page(client, alice):
    client.force_login(alice)

    response = _check(client, "claude_desktop_config.json")

    assert GITHUB_TOKEN.encode() not in response.content
    assert b"GITHUB_PERSONAL_ACCESS_TOKEN=" in response.content


def test_it_imports_the_checked_file_on_confirmation(client, alice):
    client.force_login(alice)
    token = _token(_check(client, "claude_desktop_config.json", tier="builtin"))

    response = _confirm(client, token)

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:servers_mcpserver_changelist")
    assert set(McpServer.objects.values_list("trust_tier", flat=True)) == {TrustTier.BUILTIN}
    assert McpServer.objects.get(slug="github").env["GITHUB_PERSONAL_ACCESS_TOKEN"] == GITHUB_TOKEN


def test_it_audits_the_import_as_the_user_who_confirmed_it(client, alice):
    client.force_login(alice)

    _confirm(client, _token(_check(client, "claude_desktop_config.json")))

    assert set(AuditEvent.objects.values_list("actor_label", flat=True)) == {"alice"}


def test_it_puts_servers_in_the_chosen_category(client, alice):
    CategoryFactory(slug="files", name="Files")
    client.force_login(alice)

    _confirm(client, _token(_check(client, "claude_desktop_config.json", category="files")))

    assert set(McpServer.objects.values_list("category__slug", flat=True)) == {"files"}


def test_it_lists_every_problem_of_a_bad_file_and_writes_nothing(client, alice):
    client.force_login(alice)
    bad = (
        b'{"mcpServers": {"shell": {"command": "npx -y server-memory"},'
        b' "meta": {"type": "sse", "url": "http://169.254.169.254/"}}}'
    )

    response = _check(client, "mcp.json", bad)

    assert response.status_code == 400
    assert b"nothing was written" in response.content
    assert b"<strong>shell</strong> &middot; <code>command</code>" in response.content
    assert b"<strong>meta</strong> &middot; <code>url</code>" in response.content
    assert McpServer.objects.count() == 0


def test_it_shows_the_size_limit_for_a_huge_file(client, alice):
    client.force_login(alice)

    with override_settings(TOOLROOM_IMPORT_MAX_BYTES=1024):
        response = _check(client, "mcp.json", b"{" + b" " * 4096 + b"}")

    assert b"imports are limited to 1.0 KB" in response.content


def test_it_lets_staff_who_may_not_vouch_import_only_untrusted_servers(client, bob):
    client.force_login(bob)

    _confirm(
        client,
        _token(
            _check(
                client,
                "toolroom.yaml",
                (DATA / "toolroom.yaml")
                .read_bytes()
                .replace(b"${REPO_DIR}", b"/srv/repo")
                .replace(b"${TRACKER_TOKEN}", b"token"),
            )
        ),
    )

    assert set(McpServer.objects.values_list("trust_tier", flat=True)) == {TrustTier.UNTRUSTED}


def test_it_refuses_a_tier_that_staff_may_not_vouch_for(client, bob):
    client.force_login(bob)

    response = _check(client, "claude_desktop_config.json", tier="builtin")

    assert b"Select a valid choice" in response.content
    assert McpServer.objects.count() == 0


def test_it_refuses_to_update_servers_for_staff_who_may_only_add(client, dave):
    McpServerFactory(slug="github", trust_tier=TrustTier.UNTRUSTED)
    client.force_login(dave)

    response = _check(client, "claude_desktop_config.json")

    assert response.status_code == 400
    assert b"you may add servers but not change them" in response.content


def test_it_names_an_existing_server_the_file_would_update(client, alice):
    McpServerFactory(slug="github", name="github", trust_tier=TrustTier.UNTRUSTED)
    client.force_login(alice)

    response = _check(client, "claude_desktop_config.json")

    assert "updates existing server &#x27;github&#x27;" in response.content.decode()
    assert b'name="confirm_updates"' in response.content


def test_it_updates_an_existing_server_only_once_the_admin_confirms_it(client, alice):
    server = McpServerFactory(slug="github", trust_tier=TrustTier.UNTRUSTED)
    client.force_login(alice)
    token = _token(_check(client, "claude_desktop_config.json"))

    refused = _confirm(client, token)

    assert refused.status_code == 200
    assert b"tick the box to confirm updating" in refused.content
    assert McpServer.objects.count() == 1
    server.refresh_from_db()
    assert server.command == ["python", "-m", "mcp_server_time"]

    confirmed = client.post(reverse(URL), {"token": token, "confirm_updates": "yes"})

    assert confirmed.status_code == 302
    assert McpServer.objects.count() == 3
    server.refresh_from_db()
    assert server.command != ["python", "-m", "mcp_server_time"]


def test_it_refuses_a_tampered_confirmation(client, alice):
    client.force_login(alice)
    token = _token(_check(client, "claude_desktop_config.json"))

    response = _confirm(client, token[:-3] + "abc")

    assert response.status_code == 302
    assert McpServer.objects.count() == 0


def test_it_refuses_a_confirmation_made_for_another_user(client, alice, bob):
    client.force_login(alice)
    token = _token(_check(client, "claude_desktop_config.json"))
    client.force_login(bob)

    _confirm(client, token)

    assert McpServer.objects.count() == 0


def test_it_checks_the_file_again_when_it_is_confirmed(client, alice):
    CategoryFactory(slug="files")
    client.force_login(alice)
    token = _token(_check(client, "claude_desktop_config.json", category="files"))
    Category.objects.filter(slug="files").delete()

    response = _confirm(client, token)

    assert response.status_code == 400
    assert b"There is no category" in response.content
    assert McpServer.objects.count() == 0
