"""Issue 11, items 3 and 4: stored secrets do not follow a server pointed elsewhere, are masked in
everything a server's output is kept in, and env and headers are launch fields."""

from __future__ import annotations

import pytest
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.core.secret_fields import MASK, mask_secret
from registry.servers import services
from registry.servers.jobs.discovery import (
    DiscoveryOutcome,
    discovery_record,
    discovery_request,
)
from registry.servers.jobs.health import HealthResult, health_record
from registry.servers.models import (
    DiscoveryRun,
    McpServer,
    ReviewStatus,
    ServerStatus,
    Transport,
)
from registry.servers.policy import Isolation, TrustTier
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db

TOKEN = "ghp_Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5eU0i"


def _http_server(**extra):
    return McpServerFactory(
        transport=Transport.STREAMABLE_HTTP,
        command=[],
        url="https://mcp.example.com/mcp",
        headers={"Authorization": f"Bearer {TOKEN}"},
        trust_tier=TrustTier.COMMUNITY,
        isolation=Isolation.SANDBOX,
        **extra,
    )


def test_a_new_url_host_drops_the_stored_headers(alice):
    server = _http_server()

    updated = services.server_update(
        actor=alice, server=server, changes={"url": "https://attacker.example.net/mcp"}
    )

    assert updated.headers == {"Authorization": ""}
    assert McpServer.objects.get(pk=server.pk).headers == {"Authorization": ""}
    event = AuditEvent.objects.get(action="server.updated")
    assert "secrets were dropped" in event.summary
    assert event.details["secrets_dropped_after"] == ["URL host"]


def test_a_new_path_on_the_same_host_keeps_the_headers(alice):
    server = _http_server()

    updated = services.server_update(
        actor=alice, server=server, changes={"url": "https://mcp.example.com/v2/mcp"}
    )

    assert updated.headers == {"Authorization": f"Bearer {TOKEN}"}


def test_headers_entered_again_with_the_new_url_are_kept(alice):
    server = _http_server()

    updated = services.server_update(
        actor=alice,
        server=server,
        changes={
            "url": "https://other.example.org/mcp",
            "headers": {"Authorization": "Bearer new-token-123456"},
        },
    )

    assert updated.headers == {"Authorization": "Bearer new-token-123456"}


@pytest.mark.parametrize(
    "changes",
    [
        {"command": ["python", "-c", "import os; print(os.environ)"]},
        {"package_registry": "pypi", "package_identifier": "x", "package_version": "1"},
    ],
)
def test_a_new_command_drops_the_stored_env(alice, changes):
    server = McpServerFactory(env={"API_KEY": TOKEN, "REGION": "eu"})

    updated = services.server_update(actor=alice, server=server, changes=changes)

    assert updated.env == {"API_KEY": "", "REGION": ""}


@pytest.mark.parametrize(
    "changes",
    [
        # What `adopt_launchers` and a re-import write: the same package, pinned.
        {
            "command": ["npx", "-y", "@acme/weather@1.2.3", "--units", "metric"],
            "package_registry": "npm",
            "package_identifier": "@acme/weather",
            "package_version": "1.2.3",
        },
        {"command": ["npx", "--yes", "@acme/weather@1.3.0", "--units", "metric"]},
    ],
)
def test_pinning_the_same_launched_package_keeps_the_stored_env(alice, changes):
    server = McpServerFactory(
        command=["npx", "-y", "@acme/weather", "--units", "metric"], env={"API_KEY": TOKEN}
    )

    updated = services.server_update(actor=alice, server=server, changes=changes)

    assert updated.env == {"API_KEY": TOKEN}


@pytest.mark.parametrize(
    "command",
    [
        ["npx", "-y", "@evil/weather@1.2.3", "--units", "metric"],
        ["npx", "-y", "@acme/weather@1.2.3", "--print-env"],
        ["uvx", "acme-weather==1.2.3", "--units", "metric"],
    ],
)
def test_another_package_or_other_arguments_drop_the_stored_env(alice, command):
    server = McpServerFactory(
        command=["npx", "-y", "@acme/weather", "--units", "metric"], env={"API_KEY": TOKEN}
    )

    updated = services.server_update(actor=alice, server=server, changes={"command": command})

    assert updated.env == {"API_KEY": ""}


def test_the_admin_form_drops_the_env_when_the_command_changes(client, alice):
    from tests.servers.test_admin_servers import _form_data

    server = McpServerFactory(
        slug="weather",
        trust_tier=TrustTier.COMMUNITY,
        isolation=Isolation.SANDBOX,
        env={"API_KEY": TOKEN},
    )
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    env_text = page.context["adminform"].form["env_text"].value()

    client.post(
        reverse("admin:servers_mcpserver_change", args=[server.pk]),
        _form_data(command="python\n-c\nimport os; print(os.environ)", env_text=env_text),
    )

    server.refresh_from_db()
    assert server.command == ["python", "-c", "import os; print(os.environ)"]
    assert server.env == {"API_KEY": ""}


def test_a_masked_value_shows_none_of_the_secret():
    assert mask_secret(TOKEN) == MASK
    assert TOKEN[-4:] not in mask_secret(TOKEN)


def test_the_server_page_shows_no_last_characters(client, alice):
    server = McpServerFactory(env={"API_KEY": TOKEN})
    client.force_login(alice)

    body = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content

    assert TOKEN[-4:].encode() not in body


def test_discovery_masks_secrets_in_stderr_errors_and_the_report(alice):
    server = McpServerFactory(env={"API_KEY": TOKEN})
    discovery_request(server=server, actor=alice, trigger="test")
    run = DiscoveryRun.objects.get(server=server)

    discovery_record(
        run=run,
        outcome=DiscoveryOutcome(
            ok=False,
            error=f"crashed with API_KEY={TOKEN}",
            error_kind="launch",
            stderr_tail=f"env: API_KEY={TOKEN}\n",
        ),
    )

    status = ServerStatus.objects.get(server=server)
    run.refresh_from_db()
    stored = [status.stderr_tail, status.last_discovery_error, run.error, str(run.summary)]
    stored += list(AuditEvent.objects.filter(server=server).values_list("summary", flat=True))
    assert not any(TOKEN in text for text in stored)
    assert f"API_KEY={MASK}" in status.stderr_tail


@pytest.mark.processes
def test_a_real_server_printing_its_env_to_stderr_shows_only_the_mask():
    """A real stdio MCP server (the tests' scenario server, started by a Python wrapper that
    first prints the API key to stderr) discovered the way a worker does."""
    import sys

    from tests.discovery_helpers import discover_inline
    from tests.mcp_fixtures import SCENARIO_SERVER

    wrapper = (
        "import os, runpy, sys; "
        "sys.stderr.write('starting with API_KEY=' + os.environ['API_KEY'] + chr(10)); "
        "sys.stderr.flush(); "
        f"sys.argv = [{SCENARIO_SERVER!r}, '--crash-on-call']; "
        f"runpy.run_path({SCENARIO_SERVER!r}, run_name='__main__')"
    )
    server = McpServerFactory(command=[sys.executable, "-c", wrapper], env={"API_KEY": TOKEN})

    run = discover_inline(server)

    status = ServerStatus.objects.get(server=server)
    assert run.status == "succeeded", run.error
    assert f"API_KEY={MASK}" in status.stderr_tail
    assert TOKEN not in status.stderr_tail
    assert TOKEN not in str(run.summary)


def test_health_checks_mask_secrets_in_errors():
    server = _http_server()

    health_record(
        results=[HealthResult(server_id=server.pk, ok=False, error=f"401 for Bearer {TOKEN}")]
    )

    assert TOKEN not in ServerStatus.objects.get(server=server).last_error


@pytest.mark.parametrize(
    "changes",
    [
        {"env": {"LD_PRELOAD": "/tmp/evil.so"}},
        {"env": {"NODE_OPTIONS": "--require /tmp/evil.js"}},
        {"headers": {"X-Forwarded-Host": "evil"}},
    ],
)
def test_editing_env_or_headers_sends_an_approved_server_back_to_review(alice, changes):
    server = _http_server(review_status=ReviewStatus.APPROVED)
    if "env" in changes:
        server = McpServerFactory(
            trust_tier=TrustTier.COMMUNITY,
            isolation=Isolation.SANDBOX,
            review_status=ReviewStatus.APPROVED,
        )

    updated = services.server_update(actor=alice, server=server, changes=changes)

    assert updated.review_status == ReviewStatus.PENDING_REVIEW
    assert AuditEvent.objects.filter(action="server.sent_back_to_review").exists()


def test_an_import_that_changes_the_command_says_the_secrets_are_dropped(alice):
    from registry.servers.importing import ImportOptions, import_apply, import_plan

    McpServerFactory(slug="git", name="Git", env={"API_KEY": TOKEN})
    content = (
        b"version: 1\nmcp_servers:\n  git:\n    name: Git\n    transport: stdio\n"
        b'    command: ["python", "-c", "print(1)"]\n    env: {API_KEY: null}\n'
    )
    checked = import_plan(content=content, filename="s.yaml", options=ImportOptions(dry_run=True))
    assert any("dropped" in warning for warning in checked.entries[0].warnings)

    import_apply(
        plan=import_plan(content=content, filename="s.yaml", options=ImportOptions()),
        actor=alice,
    )
    assert McpServer.objects.get(slug="git").env == {"API_KEY": ""}


# --- Issue 26, Low 7: the mask is never saved as a secret ---------------------------------------


def _server_with_a_header():
    return McpServerFactory(
        slug="remote",
        transport=Transport.STREAMABLE_HTTP,
        url="https://mcp.example.com/mcp",
        command=[],
        headers={"X-Api-Key": TOKEN},
    )


def test_renaming_a_masked_header_in_the_admin_does_not_store_the_mask(client, alice):
    from tests.servers.test_admin_servers import _form_data

    server = _server_with_a_header()
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    shown = page.context["adminform"].form["headers_text"].value()
    assert shown == f"X-Api-Key: {MASK}"

    response = client.post(
        reverse("admin:servers_mcpserver_change", args=[server.pk]),
        _form_data(
            transport=Transport.STREAMABLE_HTTP,
            command="",
            url="https://mcp.example.com/mcp",
            headers_text=shown.replace("X-Api-Key", "X-Key"),
        ),
    )

    assert response.status_code == 200  # the form again, with the reason
    errors = response.context["adminform"].form.errors["headers_text"]
    assert "X-Key (line 1) holds the mask" in errors[0]
    server.refresh_from_db()
    assert server.headers == {"X-Api-Key": TOKEN}


def test_no_entry_point_stores_the_mask_as_a_value(alice):
    from registry.core.errors import ApplicationError

    server = _server_with_a_header()
    with pytest.raises(ApplicationError, match="is the mask"):
        services.server_update(actor=alice, server=server, changes={"headers": {"X-Key": MASK}})
    with pytest.raises(ApplicationError, match="is the mask"):
        services.server_update(actor=alice, server=server, changes={"env": {"API_KEY": f"x{MASK}"}})
    server.refresh_from_db()
    assert server.headers == {"X-Api-Key": TOKEN}
