"""Handshake sessions and the Redis that keeps their records: the suite's Redis databases are
shared with whatever else runs on the machine (CI, other runs in parallel), so a test's
`cache.clear()` empties only its own cache's keys (tests/conftest.py); and a session the gateway
holds whose record Redis lost anyway is recorded again and served, while one a DELETE ended on
another replica is refused (docs/gateway.md, "Sessions across replicas")."""

from __future__ import annotations

import uuid

import anyio
import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from mcp import MCPError

from tests.conftest import CATALOGUE_REDIS_URL
from tests.gateway.test_gateway_failures import echo, token  # noqa: F401 (fixtures)
from tests.gateway_helpers import gateway_client, text_of
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)
from workers.gateway.shared_sessions import SessionStore

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
    gateway,
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


def _held_session(gateway) -> str:
    (session_id,) = gateway.app.state.sessions.connections
    return str(session_id)


def test_a_held_session_whose_record_redis_lost_is_recorded_again_and_served(
    gateway,
    token,  # noqa: F811
    echo,  # noqa: F811
    redis_cache,
    settings,
):
    """Redis lost the session's keys (a restart without persistence, a FLUSHDB): the process
    holding the session writes its record again instead of answering 404."""
    records = f"{settings.CACHES['default']['KEY_PREFIX']}:gateway-session:"

    async def run() -> tuple[str, str, bytes | None]:
        async with gateway_client(gateway.url, token, mode="legacy") as client:
            first = text_of(await client.call_tool("echo__echo", {"text": "before"}))
            session_id = _held_session(gateway)
            lost = list(redis_cache.scan_iter(f"{records}*"))
            assert records.encode() + session_id.encode() in lost
            redis_cache.delete(*lost)
            second = text_of(await client.call_tool("echo__echo", {"text": "after"}))
            return first, second, redis_cache.get(records + session_id)

    first, second, record = anyio.run(run)

    assert (first, second) == ("before", "after")
    assert record is not None  # any replica serves it again


def test_a_held_session_ended_on_another_replica_is_refused(
    gateway,
    token,  # noqa: F811
    echo,  # noqa: F811
    settings,
):
    """A DELETE through another replica removes the record and leaves its marker: this process,
    which still holds the session, answers 404 and drops it (it does not write it again)."""
    another_replica = SessionStore(
        CATALOGUE_REDIS_URL,
        prefix=settings.CACHES["default"]["KEY_PREFIX"],
        ttl_seconds=300,
        timeout=5,
    )

    async def run() -> tuple[str, str]:
        async with gateway_client(gateway.url, token, mode="legacy") as client:
            first = text_of(await client.call_tool("echo__echo", {"text": "before"}))
            session_id = _held_session(gateway)
            await another_replica.delete(session_id)
            await another_replica.close()
            try:
                await client.call_tool("echo__echo", {"text": "after"})
            except MCPError as exc:
                return first, str(exc)
            return first, "served"

    assert anyio.run(run) == ("before", "Session not found")
    assert gateway.app.state.sessions.connections == {}
