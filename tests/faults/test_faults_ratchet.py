"""The private-data ratchet fails closed, on a redis-server of the test's own: a cache that refuses
to write a mark withholds the confidential result, one that cannot be read refuses connect-class
tools, each with a clear isError rather than a raw error (issue 26, medium 1)."""

from __future__ import annotations

import anyio
import pytest

from registry.servers.models import McpServer
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway.test_gateway import _connect_tool_server
from tests.gateway_helpers import RunningGateway, discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)
from tests.owned_redis import OwnedRedis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@pytest.fixture
def owned_redis(tmp_path, settings):
    server = OwnedRedis(tmp_path / "redis")
    server.start()
    from registry.teams import tokens

    tokens._last_told.clear()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": server.url,
            "KEY_PREFIX": "ratchet-faults",
        }
    }
    settings.TOOLROOM_CACHE_RETRY_SECONDS = 0.3
    yield server
    server.stop()


def test_a_cache_that_refuses_the_ratchet_fails_closed(
    owned_redis,
    http_scenario_server,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    web = _connect_tool_server(tmp_path)
    gateway = RunningGateway()
    try:
        secret = discovered_http_server("echo", http_scenario_server.url)
        McpServer.objects.filter(pk=secret.pk).update(data_sensitivity="confidential")
        outside = discovered_http_server("web", web.url)
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=secret)
        GrantFactory(team=team, server=outside)
        token = AgentTokenFactory(team=team).plain

        async def call(name):
            async with gateway_client(gateway.url, token) as client:
                return await client.call_tool(name, {"text": "payroll"})

        assert anyio.run(call, "web__echo").is_error is False  # nothing read yet
        owned_redis.refuse_writes()
        withheld = anyio.run(call, "echo__echo")
        owned_redis.accept_writes()
        owned_redis.freeze()  # reads time out now
        unreadable = anyio.run(call, "web__echo")
        owned_redis.thaw()
    finally:
        gateway.stop()
        web.stop()

    assert withheld.is_error is True
    assert withheld.meta["toolroom/error"]["code"] == "ratchet_unavailable"
    assert "payroll" not in text_of(withheld)
    assert "the result is withheld" in text_of(withheld)
    assert unreadable.is_error is True
    assert unreadable.meta["toolroom/error"]["code"] == "ratchet_unavailable"
    assert "cannot read its private-data marks" in text_of(unreadable)
