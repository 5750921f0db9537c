"""Exports: Toolroom YAML and mcp.json, secrets left out unless asked for, and round trips."""

from __future__ import annotations

import io
import json
import stat
from decimal import Decimal

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from registry.servers.importing import (
    ImportAction,
    ImportOptions,
    export_servers,
    import_apply,
    import_plan,
)
from registry.servers.models import Category, McpServer, Transport
from registry.servers.policy import Isolation, NetworkMode, TrustTier
from registry.servers.services import SECRET_FIELDS, SERVER_EDITABLE_FIELDS
from tests.factories import CategoryFactory, McpServerFactory

pytestmark = pytest.mark.django_db

SECRET = "sk-live-4e7b9c1d2f3a5b6c7d8e9f0a"
HEADER_SECRET = "Bearer hdr-0f1e2d3c4b5a69788796a5b4"

# Everything an export carries, compared field by field after a round trip.
COMPARED_FIELDS = [
    "name",
    "description",
    "version",
    "homepage_url",
    "repository_url",
    "trust_tier",
    "transport",
    "command",
    "working_directory",
    "url",
    "package_registry",
    "package_identifier",
    "package_version",
    "image",
    "data_sensitivity",
    "isolation",
    "network_mode",
    "egress_allowlist",
    "storage",
    "env_not_secret",
    "memory_limit_mb",
    "cpu_limit",
    "pids_limit",
    "health_check_method",
    "health_check_tool",
    "health_check_arguments",
    "health_check_interval_seconds",
    "health_check_timeout_seconds",
    "health_failure_threshold",
    "auto_start",
    "restart_policy",
    "restart_max_attempts",
    "upstream_auth",
    "person_secret_header",
    "person_secret_prefix",
]


def test_the_round_trip_compares_every_field_an_admin_can_set():
    # A field added to the model (and to what services accept) must be exported and compared
    # too; slug and category are matched separately, env and headers are secrets (tested apart),
    # and the dependency lock is resolved again by the import from the package it names.
    assert set(COMPARED_FIELDS) == SERVER_EDITABLE_FIELDS - SECRET_FIELDS - {
        "slug",
        "category",
        "package_lock",
    }


def _registry():
    """A small registry with every kind of server and non-default policies."""
    web = CategoryFactory(slug="web", name="Web", description="Fetching the web.")
    CategoryFactory(slug="unused", name="Unused")
    McpServerFactory(
        slug="time",
        name="Time",
        description="Current time.",
        trust_tier=TrustTier.BUILTIN,
        command=["/opt/venv/bin/python", "-m", "mcp_server_time"],
        isolation=Isolation.LOCAL,
        env={"TZ": "Europe/Paris", "API_TOKEN": SECRET},
        env_not_secret=["TZ"],
        working_directory="/srv",
        health_check_interval_seconds=300,
        health_check_timeout_seconds=20,
        auto_start=True,
    )
    McpServerFactory(
        slug="fetch",
        name="Fetch",
        category=web,
        trust_tier=TrustTier.COMMUNITY,
        command=["uvx", "mcp-server-fetch==2026.10.24"],
        package_registry="pypi",
        package_identifier="mcp-server-fetch",
        package_version="2026.10.24",
        isolation=Isolation.SANDBOX,
        network_mode=NetworkMode.PROXIED,
        egress_allowlist=["en.wikipedia.org:443"],
        storage=[{"path": "/cache", "scope": "server", "size_mb": 32}],
        memory_limit_mb=256,
        cpu_limit=Decimal("0.25"),
        pids_limit=32,
        data_sensitivity="public",
        health_check_method="tool_call",
        health_check_tool="fetch",
        health_check_arguments={"url": "https://en.wikipedia.org/"},
    )
    McpServerFactory(
        slug="tracker",
        name="Tracker",
        trust_tier=TrustTier.VERIFIED,
        transport=Transport.STREAMABLE_HTTP,
        command=[],
        url="https://mcp.tracker.example.com/mcp",
        headers={"Authorization": HEADER_SECRET},
        homepage_url="https://tracker.example.com/",
        version="3.2.0",
        isolation=Isolation.SANDBOX,
        upstream_auth="person_oauth",  # each caller's own account upstream
    )
    McpServerFactory(
        slug="keyed",
        name="Keyed",
        trust_tier=TrustTier.VERIFIED,
        transport=Transport.STREAMABLE_HTTP,
        command=[],
        url="https://api.keyed.example.com/mcp",
        isolation=Isolation.SANDBOX,
        upstream_auth="person_secret",  # each caller's own API key, in the header named here
        person_secret_header="X-Api-Key",
        person_secret_prefix="",
    )
    McpServerFactory(
        slug="events",
        name="Events",
        trust_tier=TrustTier.UNTRUSTED,
        transport=Transport.SSE,
        command=[],
        url="https://events.example.com/sse",
        isolation=Isolation.SANDBOX,
    )


def _snapshot(fields=COMPARED_FIELDS):
    rows = {}
    for server in McpServer.objects.select_related("category").order_by("slug"):
        row = {name: getattr(server, name) for name in fields}
        row["category"] = server.category.slug if server.category else None
        row["env_names"] = sorted(server.env)
        row["header_names"] = sorted(server.headers)
        rows[server.slug] = row
    return rows


def _clear_registry():
    McpServer.objects.all().delete()
    Category.objects.all().delete()


def _import(text, **options):
    plan = import_plan(content=text.encode(), options=ImportOptions(**options))
    return import_apply(plan=plan, actor="cli:test")


def test_it_exports_every_server_as_toolroom_yaml():
    _registry()

    document = yaml.safe_load(export_servers())

    assert document["version"] == 1
    assert list(document["mcp_servers"]) == ["events", "fetch", "keyed", "time", "tracker"]
    assert document["mcp_servers"]["fetch"]["sandbox"] == {
        "isolation": "sandbox",
        "network": "proxied",
        "egress_allowlist": ["en.wikipedia.org:443"],
        "memory_mb": 256,
        "cpus": 0.25,
        "pids": 32,
        "storage": [{"path": "/cache", "scope": "server", "size_mb": 32}],
    }


def test_it_leaves_secrets_out_of_a_yaml_export_keeping_their_names():
    _registry()

    text = export_servers()

    assert SECRET not in text
    assert HEADER_SECRET not in text
    document = yaml.safe_load(text)
    # TZ is marked not secret: exported as it is; the secret is left out, its name kept.
    assert document["mcp_servers"]["time"]["env"] == {"API_TOKEN": None, "TZ": "Europe/Paris"}
    assert document["mcp_servers"]["tracker"]["headers"] == {"Authorization": None}


def test_it_writes_secrets_only_when_asked():
    _registry()

    document = yaml.safe_load(export_servers(include_secrets=True))

    assert document["mcp_servers"]["time"]["env"]["API_TOKEN"] == SECRET


def test_it_exports_only_the_categories_of_the_chosen_servers():
    _registry()

    document = yaml.safe_load(export_servers(servers=McpServer.objects.filter(slug="fetch")))

    assert [c["slug"] for c in document["categories"]] == ["web"]
    assert list(document["mcp_servers"]) == ["fetch"]


def test_it_round_trips_a_yaml_export_into_an_empty_registry():
    _registry()
    before = _snapshot()
    text = export_servers()
    _clear_registry()

    _import(text)

    assert _snapshot() == before


def test_it_round_trips_secrets_when_they_are_exported():
    _registry()
    text = export_servers(include_secrets=True)
    _clear_registry()

    _import(text)

    assert McpServer.objects.get(slug="time").env["API_TOKEN"] == SECRET
    assert McpServer.objects.get(slug="tracker").headers == {"Authorization": HEADER_SECRET}


def test_it_stores_left_out_secrets_empty_in_a_new_registry():
    _registry()
    text = export_servers()
    _clear_registry()

    _import(text)

    # TZ is not secret: it travelled with the file.
    assert McpServer.objects.get(slug="time").env == {"API_TOKEN": "", "TZ": "Europe/Paris"}


def test_it_changes_nothing_when_an_export_is_imported_back():
    _registry()

    plan = import_plan(content=export_servers().encode(), options=ImportOptions())

    assert {entry.action for entry in plan.entries} == {ImportAction.UNCHANGED}
    assert McpServer.objects.get(slug="time").env["API_TOKEN"] == SECRET


def test_it_exports_the_claude_desktop_mcp_json_shape():
    _registry()

    document = json.loads(export_servers(format="mcp-json", include_secrets=True))

    assert document["mcpServers"]["time"] == {
        "command": "/opt/venv/bin/python",
        "args": ["-m", "mcp_server_time"],
        "env": {"API_TOKEN": SECRET, "TZ": "Europe/Paris"},
        "cwd": "/srv",
    }
    assert document["mcpServers"]["tracker"] == {
        "type": "http",
        "url": "https://mcp.tracker.example.com/mcp",
        "headers": {"Authorization": HEADER_SECRET},
        "oauth": {},  # each person signs in: read back as person_oauth
    }
    assert document["mcpServers"]["events"]["type"] == "sse"


def test_it_leaves_secrets_out_of_an_mcp_json_export():
    _registry()

    text = export_servers(format="mcp-json")

    assert SECRET not in text
    assert HEADER_SECRET not in text
    assert json.loads(text)["mcpServers"]["time"]["env"] == {"API_TOKEN": None, "TZ": None}


def test_it_round_trips_what_mcp_json_can_express():
    _registry()
    launch = ["transport", "command", "working_directory", "url"]
    before = _snapshot(launch)
    text = export_servers(format="mcp-json")
    _clear_registry()

    _import(text)

    after = _snapshot(launch)
    for row in (*before.values(), *after.values()):
        row.pop("category")
    assert after == before


def test_the_command_writes_yaml_to_standard_output():
    _registry()
    out = io.StringIO()

    call_command("export_servers", "time", stdout=out, stderr=io.StringIO())

    assert list(yaml.safe_load(out.getvalue())["mcp_servers"]) == ["time"]
    assert SECRET not in out.getvalue()


def test_the_command_writes_an_owner_only_file_when_it_holds_secrets(tmp_path):
    _registry()
    path = tmp_path / "servers.yaml"
    err = io.StringIO()

    call_command("export_servers", "--include-secrets", "--output", str(path), stderr=err)

    assert SECRET in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "contains secrets" in err.getvalue()


def test_the_command_refuses_an_unknown_slug():
    _registry()

    with pytest.raises(CommandError, match="No server with the slug: nope"):
        call_command("export_servers", "time", "nope", stdout=io.StringIO())
