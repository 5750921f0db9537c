"""Per-team catalogue versions: the database holds them, the cache mirrors them for 304s.

A team's state is its version and the earliest upcoming expiry (of a grant or an agent token) that
affects it. Every change that can alter what the team's agents see bumps the version in the
database and writes the new state to the cache; a state read after its expiry moment is stale and
is bumped on the spot, so expiry needs no clean-up task.

The cache never goes backwards: with Redis a small Lua script writes a state only if its version
is at least the cached one, so a slow reader that filled the cache from an older database read
cannot hide a later bump. Other cache backends (the quickstart's file cache, one machine) do the
same compare without atomicity and keep states for a short while only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from django.core.cache.backends.redis import RedisCache
from django.db import transaction
from django.db.models import F, Min
from django.utils import timezone

from registry.catalogue.cache import hot_cache
from registry.teams.models import AgentToken, Grant, Team

logger = logging.getLogger(__name__)

STATE_CACHE_SECONDS = 600
FALLBACK_STATE_CACHE_SECONDS = 30

_SET_IF_NEWER = """
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  local value = ARGV[i]
  local new_version = tonumber(string.match(value, '^(%d+)'))
  local current = redis.call('GET', key)
  local current_version = -1
  if current then current_version = tonumber(string.match(current, '^(%d+)')) or -1 end
  if new_version >= current_version then redis.call('SET', key, value, 'EX', ttl) end
end
return 0
"""


@dataclass(frozen=True)
class CatalogueState:
    version: int
    valid_until: float | None  # POSIX seconds of the earliest upcoming expiry, if any

    def encode(self) -> str:
        until = "" if self.valid_until is None else repr(self.valid_until)
        return f"{self.version}|{until}"

    @classmethod
    def decode(cls, raw: str | bytes) -> CatalogueState:
        text = raw.decode() if isinstance(raw, bytes) else raw
        version, _, until = text.partition("|")
        return cls(version=int(version), valid_until=float(until) if until else None)

    def is_stale(self, now: float) -> bool:
        return self.valid_until is not None and self.valid_until <= now


def state_key(team_id: int) -> str:
    return f"catalogue-state:{team_id}"


def _backend() -> Any:
    return hot_cache()


def _state_get(team_id: int) -> CatalogueState | None:
    backend = _backend()
    if isinstance(backend, RedisCache):
        # Read raw: the value is plain text written by the Lua script, not a pickle.
        key = backend.make_and_validate_key(state_key(team_id))
        raw = cast(Any, backend)._cache.get_client(key, write=True).get(key)  # the primary: no lag
    else:
        raw = backend.get(state_key(team_id))
    return CatalogueState.decode(raw) if raw else None


def _states_set_if_newer(states: dict[int, CatalogueState]) -> None:
    if not states:
        return
    backend = _backend()
    if isinstance(backend, RedisCache):
        keys = [backend.make_and_validate_key(state_key(team_id)) for team_id in states]
        client = cast(Any, backend)._cache.get_client(keys[0], write=True)
        client.eval(
            _SET_IF_NEWER,
            len(keys),
            *keys,
            *[state.encode() for state in states.values()],
            STATE_CACHE_SECONDS,
        )
        return
    for team_id, state in states.items():
        current = backend.get(state_key(team_id))
        if current is None or CatalogueState.decode(current).version <= state.version:
            backend.set(state_key(team_id), state.encode(), FALLBACK_STATE_CACHE_SECONDS)


def _states_from_db(team_ids: list[int]) -> dict[int, CatalogueState]:
    now = timezone.now()
    versions = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "catalogue_version"))
    upcoming: dict[int, float] = {}
    for queryset in (
        Grant.objects.filter(team_id__in=team_ids, revoked_at__isnull=True, expires_at__gt=now),
        AgentToken.objects.filter(
            team_id__in=team_ids, revoked_at__isnull=True, expires_at__gt=now
        ),
    ):
        for team_id, earliest in (
            queryset.values("team_id")
            .annotate(earliest=Min("expires_at"))
            .values_list("team_id", "earliest")
        ):
            moment = earliest.timestamp()
            upcoming[team_id] = min(moment, upcoming.get(team_id, moment))
    return {
        team_id: CatalogueState(version=version, valid_until=upcoming.get(team_id))
        for team_id, version in versions.items()
    }


def catalogue_state(*, team_id: int) -> CatalogueState:
    """The team's current state; from the cache (no query) unless missing or stale."""
    state = _state_get(team_id)
    if state is None:
        fresh = _states_from_db([team_id])
        if team_id not in fresh:
            return CatalogueState(version=0, valid_until=None)
        state = fresh[team_id]
        _states_set_if_newer(fresh)
    if state.is_stale(time.time()):
        # An expiry passed since the version was written: what the team sees changed without a
        # write. Bump once (the conditional update keeps racing readers from bumping twice).
        Team.objects.filter(pk=team_id, catalogue_version=state.version).update(
            catalogue_version=F("catalogue_version") + 1
        )
        fresh = _states_from_db([team_id])
        _states_set_if_newer(fresh)
        state = fresh.get(team_id, state)
    return state


def catalogue_versions_bump(*, team_ids: Iterable[int], reason: str) -> None:
    """Bump the teams' versions now and mirror the new states into the cache.

    For changes already committed (the visibility signal arrives after commit). `reason` names
    the change, for logs and tests.
    """
    ids = sorted(set(team_ids))
    if not ids:
        return
    logger.debug("catalogue versions of teams %s bumped: %s", ids, reason)
    Team.objects.filter(pk__in=ids).update(catalogue_version=F("catalogue_version") + 1)
    _states_set_if_newer(_states_from_db(ids))


def catalogue_versions_bump_on_commit(*, team_ids: Iterable[int], reason: str) -> None:
    """Bump the teams' versions inside the current transaction, with the change itself, and
    mirror them into the cache once it commits.

    The database can then never hold a change without its bump; a cache that missed the mirror
    (a crash between commit and mirror) holds the older state STATE_CACHE_SECONDS at most.
    """
    ids = sorted(set(team_ids))
    if not ids:
        return
    logger.debug("catalogue versions of teams %s bumped: %s", ids, reason)
    Team.objects.filter(pk__in=ids).update(catalogue_version=F("catalogue_version") + 1)
    transaction.on_commit(lambda: _states_set_if_newer(_states_from_db(ids)))


def teams_granted_servers(server_ids: Iterable[int]) -> list[int]:
    """Teams holding a grant (of the server or of one of its tools) on any of these servers."""
    return sorted(
        set(
            Grant.objects.filter(server_id__in=list(server_ids), revoked_at__isnull=True)
            .values_list("team_id", flat=True)
            .distinct()
        )
    )
