"""The suite's Redis databases are shared with whatever else runs on the machine (CI, other runs in
parallel): a test's `cache.clear()` empties only its own cache's keys, so a handshake session a
gateway holds in another run keeps its record and is served (tests/conftest.py)."""

from __future__ import annotations

import uuid

import anyio
import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache

from tests.conftest import CATALOGUE_REDIS_URL
from tests.gateway.test_gateway_failures import echo, gateway, token  # noqa: F401 (fixtures)
from tests.gateway_helpers import gateway_client, text_of
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
]


def _another_runs_cache() -> RedisCache:
    """The cache of another run on the same Redis database (its own key prefix)."""
    return RedisCache(CATALOGUE_REDIS_URL, {"KEY_PREFIX": f"test-{uuid.uuid4().hex[:12]}"})


def test_a_cache_clear_empties_its_own_keys_and_leaves_other_runs_keys(redis_cache):
    other = f"other-run-{uuid.uuid4().hex[:12]}:gateway-session:abc"
    redis_cache.set(other, "kept", ex=60)
    cache.set("mine", "gone")
    try:
        cache.clear()
        assert cache.get("mine") is None
        assert redis_cache.get(other) == b"kept"
    finally:
        redis_cache.delete(other)


def test_a_handshake_session_is_served_after_another_run_clears_its_cache(
    gateway,  # noqa: F811 (the fixtures imported above)
    token,  # noqa: F811
    echo,  # noqa: F811
):
    """What once failed the 100-session test (1 run in 8 beside `make test`): the other run's
    `cache.clear()` (test_gateway_search_mode.py, per example) was FLUSHDB, which took this
    gateway's session records with it; the gateway then answered 404 'Session not found'."""

    async def run() -> tuple[str, str]:
        async with gateway_client(gateway.url, token, mode="legacy") as client:
            first = text_of(await client.call_tool("echo__echo", {"text": "before"}))
            _another_runs_cache().clear()
            second = text_of(await client.call_tool("echo__echo", {"text": "after"}))
            return first, second

    assert anyio.run(run) == ("before", "after")
