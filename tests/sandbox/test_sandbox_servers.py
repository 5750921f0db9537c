"""Servers that must be sandboxed, end to end through the registry: discovery, health checks,
warm runtimes and the errors an admin sees, against the real Docker engine."""

from __future__ import annotations

import docker
import pytest

from registry.servers import services
from registry.servers.jobs.health import health_record
from registry.servers.jobs.launch import server_launch_plan
from registry.servers.jobs.runtime import runtime_request
from registry.servers.models import Health, RuntimeState, ServerStatus
from registry.servers.policy import TrustTier
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from workers.health import check_plans
from workers.runtime import RuntimeManager

pytestmark = pytest.mark.containers

TIME_VERSION = "2026.10.19"


def _sandboxed(**fields):
    defaults = {
        "trust_tier": TrustTier.UNTRUSTED,
        "isolation": "sandbox",
        "network_mode": "none",
        "data_sensitivity": "internal",
    }
    return McpServerFactory(**{**defaults, **fields})


def _time_server(**fields):
    return _sandboxed(
        command=["uvx", f"mcp-server-time=={TIME_VERSION}"],
        package_registry="pypi",
        package_identifier="mcp-server-time",
        package_version=TIME_VERSION,
        **fields,
    )


def _hostile_server(images, **fields):
    return _sandboxed(
        image=images.servers.reference,
        command=["python", "/opt/servers/hostile.py"],
        **fields,
    )


def _containers_of(server):
    client = docker.from_env()
    try:
        return client.containers.list(
            all=True, filters={"label": f"io.toolroom.server={server.slug}"}
        )
    finally:
        client.close()


# The image record is written from a worker thread: these tests commit for it to be seen.
@pytest.mark.django_db(transaction=True)
def test_an_untrusted_package_is_discovered_in_a_sandbox_then_can_be_approved(images, alice):
    server = _time_server()

    run = discover_inline(server)

    assert run.status == "succeeded", run.error
    assert set(server.tools.values_list("name", flat=True)) == {"get_current_time", "convert_time"}
    status = ServerStatus.objects.get(server=server)
    assert status.sandbox_image == images.time_server.reference
    assert status.sandbox_image_digest == images.time_server.digest
    assert server.audit_events.filter(action="server.sandbox_image_changed").exists()
    assert not _containers_of(server)  # the discovery's container is gone
    # The vetting report is what the untrusted tier needs before approval.
    services.server_submit_for_review(actor=alice, server=server)
    approved = services.server_approve(actor=alice, server=server, note="ran it sandboxed")
    assert approved.review_status == "approved"


@pytest.mark.django_db
def test_a_sandboxed_server_is_health_checked_in_a_fresh_container(images):
    server = _time_server(
        review_status="approved", health_check_timeout_seconds=20, health_check_interval_seconds=60
    )
    [result] = _check(server)
    assert result.ok, result.error


def _check(*servers):
    import anyio

    plans = [server_launch_plan(server=server) for server in servers]
    return anyio.run(lambda: check_plans(plans, concurrency=2))


@pytest.mark.django_db
def test_an_oom_kill_is_recorded_as_a_clear_error_on_the_server(images):
    server = _hostile_server(
        images,
        review_status="approved",
        memory_limit_mb=64,
        health_check_method="tool_call",
        health_check_tool="hog",
        health_check_arguments={"megabytes": 512},
        health_check_timeout_seconds=30,
        health_check_interval_seconds=60,
        health_failure_threshold=1,
    )

    results = _check(server)
    health_record(results=results)

    status = ServerStatus.objects.get(server=server)
    assert status.health == Health.UNHEALTHY
    assert "killed for using more than 64 MB of memory (OOM)" in status.last_error


@pytest.mark.django_db
def test_a_server_that_must_be_sandboxed_without_an_image_gets_a_clear_error():
    server = _sandboxed(image="toolroom/not-built:1", command=[])
    run = discover_inline(server)
    assert run.status == "failed"
    assert "toolroom/not-built:1 is not on the Docker engine" in run.error


@pytest.mark.django_db(transaction=True)
def test_a_warm_sandboxed_runtime_holds_one_container_and_removes_it_on_stop(images):
    server = _time_server(review_status="approved")
    runtime_request(server=server, action="start", actor="test")
    manager = RuntimeManager("sandbox-test@host", heartbeat_seconds=0.5)
    manager.start()
    try:
        assert manager.command(server.pk, "start") == "running"
        assert len(_containers_of(server)) == 1
        [probe] = manager.probe_batch([server.pk])
        assert probe.ok, probe.error
        outcome = manager.discover(server.pk)
        assert outcome.ok
        assert outcome.via == "warm runtime"
        assert manager.command(server.pk, "stop") == "stopped"
    finally:
        manager.shutdown()
    assert ServerStatus.objects.get(server=server).runtime_state == RuntimeState.STOPPED
    assert not _containers_of(server)


@pytest.mark.django_db
def test_raising_the_sensitivity_tightens_the_network_without_a_review(alice):
    server = _sandboxed(
        trust_tier=TrustTier.COMMUNITY,
        review_status="approved",
        network_mode="proxied",
        egress_allowlist=["api.example.com:443"],
        data_sensitivity="internal",
    )

    updated = services.server_update(
        actor=alice, server=server, changes={"data_sensitivity": "secret"}
    )

    assert (updated.network_mode, updated.egress_allowlist) == ("none", [])
    assert updated.review_status == "approved"
    event = server.audit_events.get(action="server.updated")
    assert "tightened to none" in event.summary


@pytest.mark.django_db
def test_lowering_the_sensitivity_sends_the_server_back_to_review(alice):
    server = _sandboxed(
        trust_tier=TrustTier.COMMUNITY, review_status="approved", data_sensitivity="secret"
    )
    updated = services.server_update(
        actor=alice, server=server, changes={"data_sensitivity": "public"}
    )
    assert updated.review_status == "pending_review"


@pytest.mark.django_db
def test_a_confidential_server_may_keep_the_proxy_but_not_the_bridge(alice):
    server = _sandboxed(
        trust_tier=TrustTier.VERIFIED,
        review_status="approved",
        network_mode="bridge",
        data_sensitivity="internal",
    )
    updated = services.server_update(
        actor=alice, server=server, changes={"data_sensitivity": "confidential"}
    )
    assert updated.network_mode == "proxied"
    assert updated.review_status == "approved"
