"""Faults of the task broker, on a redis-server of the test's own: one that refuses writes (Redis
MISCONF, what a full disk does) or is frozen (SIGSTOP). A real Celery worker survives it, backs
off and works again once the broker does; a gateway call that needs the broker (starting a stdio
server on demand) is answered at once with an error result naming the cause, never a raw Redis
error or a hang."""

from __future__ import annotations

import anyio
import pytest
from django.conf import settings
from django.utils import timezone

from registry.core import task_queue
from registry.gateway.models import ToolCall
from registry.servers import services
from registry.servers.models import DiscoveryRun, DiscoveryStatus, RuntimeState, ServerStatus
from tests.catalogue_helpers import READ, approved_server
from tests.celery_worker import CeleryWorker
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, gateway_client, text_of
from tests.mcp_fixtures import scenario_argv
from tests.owned_redis import OwnedRedis
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]

# A hung call fails the test instead of hanging it (the old code waited on the broker forever).
HANG_GUARD_SECONDS = 30


@pytest.fixture
def own_broker(tmp_path, settings):
    """The control plane's send-only client on a redis-server of this test's own."""
    broker = OwnedRedis(tmp_path / "broker")
    broker.start()
    settings.CELERY_BROKER_URL = broker.url
    task_queue._client.cache_clear()
    yield broker
    broker.stop()
    task_queue._client.cache_clear()


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def stdio_agent():
    """An agent granted an approved stdio server that no runtime worker holds yet: a call must
    ask the broker for it to be started."""
    server = approved_server("files", {"read_file": READ})
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return server, AgentTokenFactory(team=team).plain


async def _call(url: str, token: str):
    with anyio.fail_after(HANG_GUARD_SECONDS):
        async with gateway_client(url, token) as client:
            return await client.call_tool("files__read_file", {"value": "x"})


def _recorded() -> ToolCall:
    wait_for(ToolCall.objects.exists, timeout=10, what="the call record")
    return ToolCall.objects.get()


@pytest.mark.processes
def test_a_broker_that_refuses_writes_is_named_in_the_callers_error_and_in_readiness(
    own_broker, gateway, stdio_agent, client
):
    assert client.get("/readyz").json()["components"]["broker"]["status"] == "ok"
    own_broker.refuse_writes()

    result = anyio.run(_call, gateway.url, stdio_agent[1])

    assert result.is_error
    text = text_of(result)
    assert "files: the server is not running and could not be started" in text
    assert "the task broker refuses writes (Redis MISCONF: it cannot save to disk)" in text
    assert "Commands that may modify the data set" not in text  # not Redis's raw text
    record = _recorded()
    assert (record.outcome, record.error_class) == ("failed", "broker_unavailable")
    broker = client.get("/readyz").json()["components"]["broker"]
    assert broker["status"] == "failing"
    assert broker["error"] == (
        "the task broker refuses writes (Redis MISCONF: it cannot save to disk)"
    )


@pytest.mark.processes
def test_a_frozen_broker_is_named_in_the_callers_error_instead_of_a_hang(
    own_broker, gateway, stdio_agent
):
    own_broker.freeze()

    result = anyio.run(_call, gateway.url, stdio_agent[1])

    assert result.is_error
    timeout = settings.TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS
    assert f"the task broker did not answer within {timeout:g} s" in text_of(result)
    assert _recorded().error_class == "broker_unavailable"


@pytest.mark.processes
def test_a_frozen_redis_that_is_cache_and_broker_is_named_in_the_callers_error(
    own_broker, gateway, stdio_agent, settings
):
    """docker-compose.yml's layout: one Redis for both. The call's checks answer from the
    database (the cache's circuit); where the runtime worker holding the server listens is only
    in the cache."""
    server, token = stdio_agent
    ServerStatus.objects.filter(server=server).update(
        runtime_owner="runtime@elsewhere",
        runtime_state=RuntimeState.RUNNING,
        runtime_heartbeat_at=timezone.now(),
    )
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": own_broker.url,
            "KEY_PREFIX": "faults",
        }
    }
    own_broker.freeze()

    result = anyio.run(_call, gateway.url, token)

    assert result.is_error
    assert "where the server's runtime worker listens could not be read" in text_of(result)
    assert _recorded().error_class == "cache_unavailable"


@pytest.mark.workers
def test_a_worker_survives_a_broker_that_refuses_writes_and_works_once_it_accepts_them(
    own_broker, tmp_path
):
    log = tmp_path / "worker.log"
    worker = CeleryWorker(log, env={"CELERY_BROKER_URL": own_broker.url})
    try:
        own_broker.refuse_writes()
        # The consumer's next BRPOP gets MISCONF: it reconnects with backoff (2 s, 4 s, ...).
        wait_for(
            lambda: log.read_text().count("Trying again in") >= 2,
            timeout=60,
            what="the worker to back off and retry",
            log=log,
        )
        assert worker.process.poll() is None, log.read_text()[-3000:]

        own_broker.accept_writes()
        server = services.server_create(  # asks the broker for a discovery
            actor="test",
            slug="after-the-fault",
            name="After the fault",
            transport="stdio",
            command=scenario_argv(),
            trust_tier="builtin",
        )
        wait_for(
            lambda: DiscoveryRun.objects.filter(
                server=server, status=DiscoveryStatus.SUCCEEDED
            ).exists(),
            timeout=90,
            what="the worker to run a discovery sent once the broker took writes again",
            log=log,
        )
        assert "Unrecoverable error" not in log.read_text()
    finally:
        worker.stop()
