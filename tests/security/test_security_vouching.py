"""Issue 11, item 1: a trust tier that may run on the worker host needs the vouch permission on
every path that sets it (services, admin form, import page); the command line is the operator's."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.models import McpServer, ReviewStatus, Transport
from registry.servers.policy import Isolation, TrustTier
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db

HOST_COMMAND = ["python3", "-c", "import os; os.system('touch /tmp/pwned')"]


def test_a_user_without_the_vouch_permission_cannot_create_a_builtin_server(bob):
    with pytest.raises(ApplicationError, match="vouch_trust_tier"):
        services.server_create(
            actor=bob,
            slug="evil",
            name="Evil",
            transport=Transport.STDIO,
            command=HOST_COMMAND,
            trust_tier=TrustTier.BUILTIN,
        )
    assert not McpServer.objects.exists()


@pytest.mark.parametrize("tier", [TrustTier.VERIFIED, TrustTier.COMMUNITY])
def test_a_user_without_the_vouch_permission_gets_no_tier_above_untrusted(bob, tier):
    with pytest.raises(ApplicationError, match="tier"):
        services.server_create(
            actor=bob, slug="s", name="S", transport=Transport.STDIO, command=["x"], trust_tier=tier
        )


def test_a_user_without_the_vouch_permission_creates_an_untrusted_sandboxed_server(bob):
    server = services.server_create(
        actor=bob, slug="s", name="S", transport=Transport.STDIO, command=["x"]
    )
    assert (server.trust_tier, server.isolation) == (TrustTier.UNTRUSTED, Isolation.SANDBOX)


def test_a_superuser_may_vouch(alice):
    server = services.server_create(
        actor=alice,
        slug="git",
        name="Git",
        transport=Transport.STDIO,
        command=["python", "-m", "mcp_server_git"],
        trust_tier=TrustTier.BUILTIN,
    )
    assert server.isolation == Isolation.LOCAL


def test_raising_the_tier_needs_the_vouch_permission(bob):
    server = McpServerFactory(trust_tier=TrustTier.UNTRUSTED, isolation=Isolation.SANDBOX)
    with pytest.raises(ApplicationError, match="raise a server's tier"):
        services.server_update(
            actor=bob,
            server=server,
            changes={"trust_tier": TrustTier.BUILTIN, "isolation": Isolation.LOCAL},
        )
    server.refresh_from_db()
    assert server.trust_tier == TrustTier.UNTRUSTED


def test_lowering_the_tier_needs_no_permission(bob):
    server = McpServerFactory(trust_tier=TrustTier.BUILTIN, isolation=Isolation.LOCAL)
    updated = services.server_update(
        actor=bob,
        server=server,
        changes={"trust_tier": TrustTier.UNTRUSTED, "isolation": Isolation.SANDBOX},
    )
    assert updated.trust_tier == TrustTier.UNTRUSTED


@pytest.mark.parametrize(
    "changes",
    [
        {"command": HOST_COMMAND},
        {"env": {"LD_PRELOAD": "/tmp/evil.so"}},
        {"working_directory": "/tmp"},
    ],
)
def test_changing_what_a_local_server_runs_needs_the_vouch_permission(bob, changes):
    server = McpServerFactory(trust_tier=TrustTier.BUILTIN, isolation=Isolation.LOCAL)
    with pytest.raises(ApplicationError, match="local process"):
        services.server_update(actor=bob, server=server, changes=changes)
    server.refresh_from_db()
    assert server.command == ["python", "-m", "mcp_server_time"]
    assert server.env == {}


def test_describing_a_local_server_needs_no_vouch_permission(bob):
    server = McpServerFactory(trust_tier=TrustTier.BUILTIN, isolation=Isolation.LOCAL)
    updated = services.server_update(actor=bob, server=server, changes={"description": "Clock"})
    assert updated.description == "Clock"


def test_the_admin_add_form_refuses_a_builtin_server_from_staff_who_may_not_vouch(client, bob):
    from tests.servers.test_admin_servers import _form_data

    client.force_login(bob)
    response = client.post(
        reverse("admin:servers_mcpserver_add"),
        _form_data(
            trust_tier=TrustTier.BUILTIN,
            isolation="local",
            command="\n".join(HOST_COMMAND),
        ),
        follow=True,
    )

    assert not McpServer.objects.exists()
    assert "vouch_trust_tier" in response.content.decode()


def test_the_admin_change_form_refuses_a_new_command_for_a_local_server(client, bob):
    from tests.servers.test_admin_servers import _form_data

    server = McpServerFactory(
        slug="weather", trust_tier=TrustTier.BUILTIN, isolation=Isolation.LOCAL
    )
    client.force_login(bob)
    client.post(
        reverse("admin:servers_mcpserver_change", args=[server.pk]),
        _form_data(
            trust_tier=TrustTier.BUILTIN, isolation="local", command="\n".join(HOST_COMMAND)
        ),
    )

    server.refresh_from_db()
    assert server.command == ["python", "-m", "mcp_server_time"]


YAML_UPDATE = b"""
version: 1
mcp_servers:
  git:
    name: Git
    transport: stdio
    command: ["python3", "-c", "import os; os.system('id')"]
"""


def test_the_import_page_cannot_change_what_a_local_server_runs(client, bob):
    McpServerFactory(
        slug="git", name="Git", trust_tier=TrustTier.BUILTIN, isolation=Isolation.LOCAL
    )
    client.force_login(bob)
    url = reverse("admin:servers_mcpserver_import")
    checked = client.post(
        url,
        {
            "file": SimpleUploadedFile("servers.yaml", YAML_UPDATE),
            "format": "auto",
            "tier": "",
            "category": "",
        },
    )
    token = re.search(r'name="token" value="([^"]+)"', checked.content.decode())
    assert token is None, "the plan itself refuses the change"
    assert "vouch_trust_tier" in checked.content.decode()
    assert McpServer.objects.get(slug="git").command == ["python", "-m", "mcp_server_time"]


def test_the_import_command_is_the_operators_and_may_vouch(tmp_path):
    path = tmp_path / "servers.yaml"
    path.write_bytes(YAML_UPDATE.replace(b"command", b"trust_tier: builtin\n    command"))
    call_command("import_servers", str(path), stdout=None)
    server = McpServer.objects.get(slug="git")
    assert (server.trust_tier, server.review_status) == (TrustTier.BUILTIN, ReviewStatus.DRAFT)
