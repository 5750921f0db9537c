"""Slow servers cannot starve the fleet's health checks: discovery has a queue and workers of its
own. Two discoveries that hang take both discovery slots (real workers), and a health check on
the health worker still runs at once."""

from __future__ import annotations

import pytest

from registry.core import task_queue
from registry.servers import services
from registry.servers.models import DiscoveryRun, DiscoveryStatus, Health, ServerStatus
from tests.celery_worker import CeleryWorker
from tests.mcp_fixtures import scenario_argv
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


def _server(slug: str, *flags: str):
    return services.server_create(
        actor="test",
        slug=slug,
        name=slug.title(),
        transport="stdio",
        command=scenario_argv(*flags),
        trust_tier="builtin",
        health_check_interval_seconds=10,
        health_check_timeout_seconds=5,
    )


def test_two_hanging_discoveries_do_not_hold_up_health_checks(tmp_path):
    discovery = CeleryWorker(tmp_path / "discovery.log", queues="discovery", concurrency=2)
    health = CeleryWorker(tmp_path / "health.log", queues="toolroom", concurrency=2)
    try:
        slow = [_server(f"slow-{n}", "--hang-on", "list") for n in (1, 2)]
        wait_for(
            lambda: (
                DiscoveryRun.objects.filter(server__in=slow, status=DiscoveryStatus.RUNNING).count()
                == 2
            ),
            timeout=60,
            what="both discovery slots to be taken",
            log=tmp_path / "discovery.log",
        )
        fine = _server("fine")
        services.server_submit_for_review(actor="test", server=fine)
        services.server_approve(actor="test", server=fine)

        task_queue.send_now(task_queue.HEALTH_SWEEP)

        wait_for(
            lambda: ServerStatus.objects.get(server=fine).health == Health.HEALTHY,
            timeout=60,
            what="the health check",
            log=tmp_path / "health.log",
        )
        # The slow discoveries still hold both discovery slots; the new one waits its turn.
        assert (
            DiscoveryRun.objects.filter(server__in=slow, status=DiscoveryStatus.RUNNING).count()
            == 2
        )
        assert DiscoveryRun.objects.get(server=fine).status == DiscoveryStatus.QUEUED
    finally:
        discovery.kill()
        health.stop()
