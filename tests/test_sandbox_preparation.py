"""`manage.py sandbox prepare` (what `make run` starts in the background): the progress and the
outcome the admin sees, with the real engine and with none answering."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from registry.servers.models import DiscoveryRun, SandboxPreparation
from registry.servers.operations.sandbox_preparation import (
    FIX_COMMAND,
    sandbox_needs,
    sandbox_preparation_record,
)
from tests.factories import McpServerFactory
from tests.sandbox_images import ensure_node_test_image, ensure_test_images

pytestmark = pytest.mark.django_db


def _sandboxed(slug, **fields):
    defaults = {"trust_tier": "untrusted", "isolation": "sandbox", "network_mode": "none"}
    return McpServerFactory(slug=slug, **{**defaults, **fields})


def _npm_server():
    return _sandboxed(
        "memory",
        command=["npx", "-y", "@modelcontextprotocol/server-memory@2026.8.31"],
        package_registry="npm",
        package_identifier="@modelcontextprotocol/server-memory",
        package_version="2026.8.31",
    )


def test_it_knows_which_base_images_the_servers_need():
    _npm_server()
    _sandboxed("py", command=["python3", "-m", "x"])
    McpServerFactory(slug="local", trust_tier="builtin", isolation="local", command=["node"])

    needs = sandbox_needs()

    assert (needs.servers, needs.node, needs.proxy) == (2, True, False)


def test_without_an_engine_each_sandboxed_page_says_so_once_with_the_fix(
    client, alice, monkeypatch
):
    # Nothing listens on this socket: the engine is absent, as on a machine without Docker.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/toolroom-no-engine.sock")
    server = _npm_server()
    local = McpServerFactory(slug="local", trust_tier="builtin", isolation="local")
    err = io.StringIO()

    call_command("sandbox", "prepare", stderr=err)

    assert SandboxPreparation.objects.get().state == "no_engine"
    assert f"Fix: {FIX_COMMAND}" in err.getvalue()
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()
    assert page.count("No Docker engine answers") == 1
    assert page.count(FIX_COMMAND) == 1
    local_page = client.get(reverse("admin:servers_mcpserver_change", args=[local.pk]))
    assert "No Docker engine answers" not in local_page.content.decode()
    fleet = client.get(reverse("admin:servers_mcpserver_fleet")).content.decode()
    assert "No Docker engine" in fleet
    assert FIX_COMMAND in fleet


@pytest.mark.containers
def test_with_the_images_on_the_engine_it_is_ready_and_discovers_the_servers(client, alice):
    # The images exist (built once, reused); building them is what ensure_* and the image
    # tests exercise. Here: nothing missing means no build, state ready, discoveries requested.
    ensure_test_images(say=lambda *_: None)
    ensure_node_test_image(say=lambda *_: None)
    server = _npm_server()
    _sandboxed(
        "fetch", command=["python3", "-m", "x"], network_mode="proxied", trust_tier="community"
    )
    DiscoveryRun.objects.all().delete()  # those queued when the servers were created

    err = io.StringIO()
    call_command("sandbox", "prepare", stderr=err)

    # The proxy's image is the one step left (kept: it exists), reported as progress.
    assert "sandbox: 1/1 the egress proxy's image" in err.getvalue()
    assert "sandbox: images ready; discovering" in err.getvalue()
    preparation = SandboxPreparation.objects.get()
    assert preparation.state == "ready"
    assert set(DiscoveryRun.objects.values_list("server__slug", flat=True)) == {"memory", "fetch"}
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()
    assert "sandbox-preparation" not in page


def test_the_fleet_page_shows_the_progress_while_images_build(client, alice):
    sandbox_preparation_record(
        state="building", step="building toolroom/sandbox-base:bookworm", steps_total=3
    )
    client.force_login(alice)

    fleet = client.get(reverse("admin:servers_mcpserver_fleet")).content.decode()

    assert "Building images</strong> (0/3 done): building toolroom/sandbox-base:bookworm" in fleet
