"""`/healthz` says the process answers; `/readyz` names every component (database, cache, broker,
heartbeats of workers, runtime workers and beat, the Docker engine as workers see it, stuck
discovery runs) with an overall ok/degraded/failing; `manage.py probe` checks a heartbeat."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from registry.core.models import ProcessHeartbeat
from tests.owned_redis import OwnedRedis

pytestmark = pytest.mark.django_db


def _beat(kind: str, *, age: float = 0, docker: str = "not configured", host: str = "") -> None:
    now = timezone.now()
    ProcessHeartbeat.objects.create(
        name=f"{kind}@{host or socket.gethostname()}",
        kind=kind,
        host=host or socket.gethostname(),
        pid=1,
        started_at=now - timedelta(seconds=age),
        beat_at=now - timedelta(seconds=age),
        details={"docker": docker},
    )


def test_healthz_answers_without_touching_anything(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.usefixtures("redis_cache")
def test_it_is_ready_when_every_component_is(client):
    for kind in ("worker", "beat"):
        _beat(kind)

    report = client.get("/readyz").json()

    assert report["status"] == "ok", report
    components = report["components"]
    assert {name: c["status"] for name, c in components.items()} == {
        "database": "ok",
        "cache": "ok",
        "broker": "ok",
        "workers": "ok",
        "runtime_workers": "ok",
        "beat": "ok",
        "docker": "ok",
        "discovery": "ok",
        "runtimes": "ok",
    }
    assert set(components["broker"]["queues"]) == {"toolroom", "discovery", "runtime"}


@pytest.mark.usefixtures("redis_cache")
def test_missing_or_stale_heartbeats_and_a_failing_engine_degrade_it(client):
    _beat("worker", age=600)
    _beat("beat", docker="ok")
    _beat("runtime", docker="failing: nothing at tcp://docker-socket-proxy:2375", host="other")

    response = client.get("/readyz")

    report = response.json()
    assert response.status_code == 200  # degraded still serves
    assert report["status"] == "degraded"
    assert report["components"]["workers"]["alive"] == 0
    assert report["components"]["workers"]["status"] == "degraded"
    assert report["components"]["docker"]["status"] == "degraded"
    assert report["components"]["beat"]["status"] == "ok"


def test_a_cache_that_is_down_degrades_it(client, settings, tmp_path):
    cache = OwnedRedis(tmp_path / "redis")
    cache.start()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": cache.url,
            "KEY_PREFIX": "readyz",
        }
    }
    _beat("worker")
    _beat("beat")
    assert client.get("/readyz").json()["status"] == "ok"
    cache.stop()

    report = client.get("/readyz").json()

    assert report["status"] == "degraded"
    assert report["components"]["cache"]["status"] == "degraded"
    assert report["components"]["database"]["status"] == "ok"


def test_the_probe_passes_only_on_a_fresh_heartbeat_of_this_host():
    with pytest.raises(CommandError, match="no fresh worker heartbeat"):
        call_command("probe", "worker")
    _beat("worker", age=600)
    with pytest.raises(CommandError):
        call_command("probe", "worker")
    _beat("beat", host="elsewhere")
    with pytest.raises(CommandError):
        call_command("probe", "beat")
    call_command("probe", "beat", "--any-host")
    ProcessHeartbeat.objects.filter(kind="worker").update(beat_at=timezone.now())
    call_command("probe", "worker")
