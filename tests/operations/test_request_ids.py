"""A request id for every web request (`X-Request-ID`), on JSON log lines (`LOG_FORMAT=json`),
and carried into the tasks the request started: a real worker logs them under the same id."""

from __future__ import annotations

import json
import logging

import pytest

from registry.core.request_ids import JsonFormatter, RequestIdFilter, request_id_bound
from registry.servers import services
from registry.servers.jobs.discovery import discovery_request
from registry.servers.models import DiscoveryRun
from tests.celery_worker import CeleryWorker
from tests.mcp_fixtures import scenario_argv
from tests.waiting import wait_for


def test_a_sane_request_id_is_kept_and_anything_else_replaced(client):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="abc-123")["X-Request-ID"] == "abc-123"
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="<script>")["X-Request-ID"]
    assert replaced != "<script>"
    assert len(replaced) == 32
    assert client.get("/healthz")["X-Request-ID"] != client.get("/healthz")["X-Request-ID"]


def test_new_request_ids_are_version_4_uuids_and_distinct():
    import uuid

    from registry.core.request_ids import request_id_for

    made = [request_id_for(None) for _ in range(10_000)]
    assert len(set(made)) == len(made)
    for request_id in made[:100]:
        assert len(request_id) == 32
        assert uuid.UUID(hex=request_id).version == 4
        assert uuid.UUID(hex=request_id).variant == uuid.RFC_4122


def test_json_lines_carry_the_request_id():
    record = logging.LogRecord(
        "toolroom.test", logging.WARNING, __file__, 1, "hello %s", ("x",), None
    )
    with request_id_bound("req-42"):
        RequestIdFilter().filter(record)

    line = json.loads(JsonFormatter().format(record))

    assert line["message"] == "hello x"
    assert line["request_id"] == "req-42"
    assert line["level"] == "WARNING"


@pytest.mark.workers
@pytest.mark.django_db(transaction=True)
def test_the_request_id_follows_into_the_tasks_it_started(tmp_path):
    log = tmp_path / "worker.log"
    worker = CeleryWorker(log, env={"LOG_FORMAT": "json"})
    try:
        server = services.server_create(
            actor="test",
            slug="traced",
            name="Traced",
            transport="stdio",
            command=scenario_argv(),
            trust_tier="builtin",
        )
        wait_for(  # the discovery its creation asked for (no request id), out of the way
            lambda: (
                not DiscoveryRun.objects.filter(
                    server=server, status__in=["queued", "running"]
                ).exists()
            ),
            timeout=60,
            what="the first discovery",
            log=log,
        )
        with request_id_bound("trace-me-1"):
            discovery_request(server=server, actor="test", trigger="test")

        def traced_task_logged() -> bool:
            for text in log.read_text().splitlines():
                if not text.startswith("{"):
                    continue
                line = json.loads(text)
                if (
                    line["request_id"] == "trace-me-1"
                    and "discover_server started" in line["message"]
                ):
                    return True
            return False

        wait_for(traced_task_logged, timeout=60, what="the task's log line", log=log)
    finally:
        worker.stop()
