"""Shared fixtures: the personas (alice, bob, charlie), and the rule that CI skips nothing."""

from __future__ import annotations

import os
import re
import time

import pytest
from django.contrib.auth.models import Permission

from tests.factories import UserFactory
from tests.owned_postgres import own_database  # noqa: F401 (a fixture for every module)


def _own_keys_cleared(self) -> bool:
    """`RedisCache.clear` in the suite: only the keys under the cache's own prefix."""
    if not self.key_prefix:
        raise RuntimeError("a Redis cache without KEY_PREFIX: clear() would empty other runs' keys")
    client = self._cache.get_client(None, write=True)
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.key_prefix) + ":*"
    keys = list(client.scan_iter(match=pattern, count=1000))
    if keys:
        client.delete(*keys)
    return True


@pytest.fixture(autouse=True, scope="session")
def _redis_cache_clear_keeps_other_runs_keys():
    """Django's `RedisCache.clear()` is FLUSHDB: every key of the database, and the suite's Redis
    databases are shared with whatever else runs on the machine (CI, other runs in parallel). A
    test's `cache.clear()` (test_gateway_search_mode.py, once per random example) emptied a
    parallel run's handshake-session records: its gateway then answered 404 'Session not found'
    to every session it had just opened (docs/development.md). In the suite, `clear()` empties
    the keys under the cache's own prefix (each run and each `redis_cache` test has its own)."""
    from django.core.cache.backends.redis import RedisCache

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RedisCache, "clear", _own_keys_cleared)
        yield


@pytest.fixture(autouse=True)
def _process_caches_forgotten():
    """Every test starts without the catalogues and call tables a process keeps per team version:
    a rolled-back or flushed test database hands the same team ids and versions to the next test,
    which would find the last test's entries (production versions only ever grow)."""
    from registry.core.process_cache import forget_all

    forget_all()
    _cached_catalogues_forgotten()
    _local_memory_caches_emptied()


def _cached_catalogues_forgotten():
    """The same goes for the team states and documents in Redis: the epoch they are kept under
    lives in the rolled-back database too, so it repeats from test to test. Only these entries
    go (the processes a test runs keep their runtime addresses and the broker its queues)."""
    from django.core.cache.backends.redis import RedisCache

    from registry.core.cache import hot_cache

    backend = hot_cache()
    if not isinstance(backend, RedisCache):
        return
    client = backend._cache.get_client(None, write=True)
    keys = [
        key
        for name in ("catalogue-doc:*", "catalogue-state:*")
        for key in client.scan_iter(match=backend.make_key(name), count=1000)
    ]
    if keys:
        client.delete(*keys)


def _local_memory_caches_emptied():
    """And for the tests that switch the default cache to LocMemCache: Django keeps its storage
    in module-level dicts keyed by LOCATION, so every such test of the process shares one store,
    whatever its settings. On SQLite the next test gets the same team ids again (the rollback
    resets the id sequence) under the same epoch (1: the epoch row was rolled back, and without
    Redis nothing moves it), so it finds the states the last test left for its teams. One at a
    higher version than the new team's is newer for `_states_set_if_newer`, which by design
    never writes an older version over it: the new team's bumps never reach the cache, every
    read gets the old version, hence the same ETag and the cached answer from before the
    change (test_a_tool_changed_since_approval_disappears_and_returns_when_reapproved failed
    after the exhaustive search test's last random world left team 1 at version 7)."""
    from django.core.cache.backends import locmem

    for location in list(locmem._caches):
        locmem.LocMemCache(location, {}).clear()


@pytest.fixture
def alice(db):
    """A superuser: the platform admin."""
    return UserFactory(username="alice", is_staff=True, is_superuser=True)


@pytest.fixture
def bob(db):
    """Staff who may review servers and approve tools, but may not vouch for trust tiers."""
    user = UserFactory(username="bob", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="servers",
            codename__in=[
                "view_mcpserver",
                "change_mcpserver",
                "add_mcpserver",
                "review_mcpserver",
                "view_tool",
                "change_tool",
                "approve_tool",
                "view_category",
            ],
        )
    )
    return user


@pytest.fixture
def charlie(db):
    """A user without any admin access."""
    return UserFactory(username="charlie")


def pytest_addoption(parser):
    parser.addoption(
        "--stack",
        action="store_true",
        help="run only the production stack tier (marker `stack`, tests/operations/test_stack.py): "
        "make stack-test does, after building its images",
    )


def pytest_collection_modifyitems(config, items):
    """The `stack` tier runs alone and only when asked (`--stack`): it brings up the whole
    docker-compose.yml stack, which `make stack-test` and CI's own step do once per run. Without
    the option its tests are deselected (not skipped); with it, every other test is."""
    wanted = config.getoption("--stack")
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        is_stack = item.get_closest_marker("stack") is not None
        (kept if is_stack == wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """In CI a skipped test is a failure: what is not run is not known to work."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        terminalreporter.write_sep("=", f"CI=true and {len(skipped)} test(s) skipped", red=True)
        for report in skipped:
            terminalreporter.write_line(f"SKIPPED {report.nodeid}: {report.longrepr}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    _check_process_hygiene(session, reporter)
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    if reporter is not None and reporter.stats.get("skipped"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _check_process_hygiene(session, reporter):
    """No zombie children, and no MCP server process the suite started still running."""
    import socket

    from tests.process_hygiene import server_processes_started_by, zombie_children

    time.sleep(0.5)  # let the last children exit and be reaped
    zombies = zombie_children()
    orphans = server_processes_started_by({f"{socket.gethostname()}:{os.getpid()}"})
    if not zombies and not orphans:
        return
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if reporter is not None:
        reporter.write_sep("=", "process hygiene", red=True)
        if zombies:
            reporter.write_line(f"zombie child processes (never waited for): {zombies}")
        if orphans:
            reporter.write_line(f"MCP server processes still running after the suite: {orphans}")


@pytest.fixture
def anyio_backend():
    """The anyio tests run on asyncio (what the workers and the gateway run on)."""
    return "asyncio"


class Clock:
    """Wall-clock time that a test moves forward: `time.time()` and `timezone.now()` read it.

    For expiry windows (a grant or token valid for one more second): `clock.advance(2)` instead
    of sleeping past them. Monotonic time (timeouts, circuits) is left alone.
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    moved = Clock()
    real_time, real_now = time.time, timezone.now
    monkeypatch.setattr(time, "time", lambda: real_time() + moved.offset)
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=moved.offset))
    return moved


# --- Teams, agents, a real Redis cache (the catalogue's tests) ----------------------------------

CATALOGUE_REDIS_URL = os.environ.get("TOOLROOM_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.fixture
def team(charlie):
    """Team alpha, with charlie as its one member."""
    from registry.teams import services
    from tests.factories import TeamFactory

    alpha = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=alpha, user=charlie)
    return alpha


@pytest.fixture
def dave(db):
    """A person without admin access, member of a team of their own (see the team tests)."""
    return UserFactory(username="dave")


@pytest.fixture
def redis_cache(settings):
    """The default cache on a real Redis (DB 13), under a key prefix of this test's own."""
    import uuid

    import redis

    client = redis.Redis.from_url(CATALOGUE_REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {CATALOGUE_REDIS_URL} (make test starts it): {exc}")
    from registry.teams import tokens

    tokens._last_told.clear()  # ids repeat from test to test
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CATALOGUE_REDIS_URL,
            "KEY_PREFIX": prefix,
        }
    }
    yield client
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)


@pytest.fixture
def no_periodic_queries(settings, monkeypatch):
    """For a test that counts queries: the cache epoch's confirmation (one query, due every
    TOOLROOM_CACHE_REVALIDATE_SECONDS, 30 s in the suite, from the test's first) and an agent
    token's last-use write (at most once every LAST_USED_FLUSH_SECONDS) happen on the first use
    only. Otherwise the interval can run out between two counted requests on a loaded machine
    (an extra query; CI counted one once). Nothing else changes: an hour is longer than any test."""
    from registry.teams import tokens

    settings.TOOLROOM_CACHE_REVALIDATE_SECONDS = 3600
    monkeypatch.setattr(tokens, "LAST_USED_FLUSH_SECONDS", 3600)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """`with committed(): service(...)` runs the on-commit work (signals, version bumps) as a
    real commit would, inside the test's transaction."""

    def run():
        return django_capture_on_commit_callbacks(execute=True)

    return run


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


# --- The sandbox: a real Docker engine and the test images ---------------------------------------


@pytest.fixture(scope="session")
def engine():
    """The Docker engine (scripts/ensure-docker starts it); the tests fail without one."""
    from workers.adapters.sandbox import EngineUnavailableError, connect_engine

    try:
        client = connect_engine()
    except EngineUnavailableError as exc:
        pytest.fail(f"The sandbox tests need a Docker engine: {exc.message}", pytrace=False)
    yield client
    client.close()


@pytest.fixture(scope="session")
def images(engine):
    """The base, proxy and test-server images: built the first time (a few minutes), found after
    that (tests/sandbox_images.py)."""
    from tests.sandbox_images import ensure_test_images

    return ensure_test_images(engine, say=lambda _line: None)
