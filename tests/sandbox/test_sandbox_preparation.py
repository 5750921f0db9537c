"""`manage.py sandbox prepare` (what `make run` starts in the background): the progress and the
outcome the admin sees, with the real engine and with none answering."""

from __future__ import annotations

import io
import time

import anyio
import pytest
from django.core.management import call_command
from django.urls import reverse
from mcp import Client

from registry.core import task_queue
from registry.servers.jobs.sandbox_preparation import (
    FIX_COMMAND,
    sandbox_needs,
    sandbox_preparation_record,
)
from registry.servers.models import DiscoveryRun, SandboxPreparation
from registry.servers.services import server_retire, server_update
from tests.factories import McpServerFactory
from tests.sandbox_images import ensure_node_test_image, ensure_test_images
from workers.adapters.sandbox import ContainerSpec, EgressPool, connect_engine, sandbox_transport
from workers.adapters.sandbox.egress_pool import StandingEgress
from workers.tasks import sandbox_egress_clean

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


def test_retiring_or_re_allowlisting_a_proxied_server_removes_its_kept_egress_network(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    """The kept network and proxy of a proxied server (egress_pool) go once the registry no
    longer wants them: the change sends the clean-up task, and the task removes them."""
    images = ensure_test_images(say=lambda _line: None)
    sent: list[tuple[str, list[object]]] = []
    monkeypatch.setattr(
        task_queue,
        "send_now",
        lambda name, *, args=(), **options: sent.append((name, list(args))),
    )
    slug = f"kept-egress-{time.monotonic_ns()}"
    server = _sandboxed(
        slug,
        network_mode="proxied",
        egress_allowlist=["first.invalid:443"],
        review_status="approved",
    )
    engine = connect_engine()
    pool = EgressPool()

    async def session(allowlist: list[str]) -> StandingEgress:
        spec = ContainerSpec(
            server_key=slug,
            image=images.servers.reference,
            argv=["python3", "/opt/servers/honest.py"],
            network_mode="proxied",
            egress_allowlist=allowlist,
        )
        async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
            await client.list_tools()
        [entry] = pool.entries()
        return entry

    def network_exists(entry: StandingEgress) -> bool:
        return bool(engine.api.networks(filters={"id": [entry.network_id]}))

    try:
        first = anyio.run(session, ["first.invalid:443"])
        assert sandbox_egress_clean([slug]) == []  # still what the registry says: kept
        assert network_exists(first)

        with django_capture_on_commit_callbacks(execute=True):
            server_update(
                actor=alice, server=server, changes={"egress_allowlist": ["second.invalid:443"]}
            )
        assert sent == [(task_queue.SANDBOX_EGRESS_CLEAN, [[slug]])]
        assert sandbox_egress_clean(*sent.pop()[1]) == [f"network {first.network_name}"]
        assert not network_exists(first)

        second = anyio.run(session, ["second.invalid:443"])
        assert sandbox_egress_clean([slug]) == []
        server.refresh_from_db()
        with django_capture_on_commit_callbacks(execute=True):
            server_retire(actor=alice, server=server)
        assert sent == [(task_queue.SANDBOX_EGRESS_CLEAN, [[slug]])]
        assert sandbox_egress_clean(*sent.pop()[1]) == [f"network {second.network_name}"]
        assert not network_exists(second)
    finally:
        pool.close(engine)
        engine.close()
