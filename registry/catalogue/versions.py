"""Per-team catalogue versions: the database holds them, the cache mirrors them for 304s.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F, Min
from django.utils import timezone

from registry.core.cache import (
    CACHE_ERRORS,
    CatalogueCache,
    cache_epoch_bump,
    cache_trip,
    catalogue_cache,
)
from registry.teams.models import AgentToken, Grant, Team

logger = logging.getLogger(__name__)

STATE_CACHE_SECONDS = 600
# How long a pending marker lives if its change never commits (readers ask the database meanwhile).
PENDING_STATE_SECONDS = 30
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

_PENDING = "pending"


@dataclass(frozen=True)
class CatalogueState:
    version: int
    valid_until: float | None  # POSIX seconds of the earliest upcoming expiry, if any
    pending: bool = False  # a change to this version is being committed: ask the database

    def encode(self) -> str:
        if self.pending:
            return f"{self.version}|{_PENDING}"
        until = "" if self.valid_until is None else repr(self.valid_until)
        return f"{self.version}|{until}"

    @classmethod
    def decode(cls, raw: str | bytes) -> CatalogueState:
        text = raw.decode() if isinstance(raw, bytes) else raw
        version, _, until = text.partition("|")
        if until == _PENDING:
            return cls(version=int(version), valid_until=None, pending=True)
        return cls(version=int(version), valid_until=float(until) if until else None)

    def is_stale(self, now: float) -> bool:
        return self.valid_until is not None and self.valid_until <= now


def state_key(team_id: int, *, cache: CatalogueCache) -> str:
    """The team's state entry, under the cache's current epoch."""
    return cache.key(f"catalogue-state:{team_id}")


def _state_get(cache: CatalogueCache, team_id: int) -> CatalogueState | None:
    if not cache.usable():
        return None
    key = state_key(team_id, cache=cache)
    client = cache.redis(key)
    try:
        # With Redis read raw: the value is plain text written by the Lua script, not a pickle.
        raw = client.get(cache.raw_key(key)) if client is not None else cache.backend.get(key)
    except CACHE_ERRORS as exc:
        cache_trip(exc, where="state read")
        return None
    if not raw or not cache.intact():
        return None
    return CatalogueState.decode(raw)


def _states_set_if_newer(
    cache: CatalogueCache, states: dict[int, CatalogueState], ttl: int = STATE_CACHE_SECONDS
) -> bool:
    """Write the states unless the cache holds newer ones; False if the cache failed."""
    if not states:
        return True
    if not cache.usable():
        return False
    keys = [state_key(team_id, cache=cache) for team_id in states]
    client = cache.redis(keys[0])
    try:
        if client is not None:
            client.eval(
                _SET_IF_NEWER,
                len(keys),
                *[cache.raw_key(key) for key in keys],
                *[state.encode() for state in states.values()],
                ttl,
            )
            return True
        for key, state in zip(keys, states.values(), strict=True):
            current = cache.backend.get(key)
            if current is None or CatalogueState.decode(current).version <= state.version:
                cache.backend.set(key, state.encode(), min(ttl, FALLBACK_STATE_CACHE_SECONDS))
    except CACHE_ERRORS as exc:
        cache_trip(exc, where="state write")
        return False
    return True


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


def _mirror(team_ids: list[int]) -> None:
    cache = catalogue_cache()
    if cache is not None:
        _states_set_if_newer(cache, _states_from_db(team_ids))


def catalogue_state_cached(*, team_id: int) -> CatalogueState | None:
    """The team's state as the cache holds it now, or None when only the database can say
    (no trusted entry, a change being committed, or an expiry passed): no query, one cache read.

    A state read here was written after its change committed (and after the hooks that ran
    before it), which is what lets the gateway trust an identity it checked after this read
    for as long as the version holds."""
    cache = catalogue_cache()
    state = _state_get(cache, team_id) if cache is not None else None
    if state is None or state.pending or state.is_stale(time.time()):
        return None
    return state


def catalogue_state(*, team_id: int) -> CatalogueState:
    """The team's current state: from the cache (no query) when it holds a trusted one, else from
    the database (always, while the cache is unavailable)."""
    cache = catalogue_cache()
    state = _state_get(cache, team_id) if cache is not None else None
    if state is None or state.pending:
        fresh = _states_from_db([team_id])
        if team_id not in fresh:
            return CatalogueState(version=0, valid_until=None)
        state = fresh[team_id]
        if cache is not None:
            _states_set_if_newer(cache, fresh)
    if state.is_stale(time.time()):
        # An expiry passed since the version was written: what the team sees changed without a
        # write. Bump once (the conditional update keeps racing readers from bumping twice). A
        # cache that misses the new state still holds one that reads as stale: no epoch needed.
        Team.objects.filter(pk=team_id, catalogue_version=state.version).update(
            catalogue_version=F("catalogue_version") + 1
        )
        fresh = _states_from_db([team_id])
        if cache is not None:
            _states_set_if_newer(cache, fresh)
        state = fresh.get(team_id, state)
    return state


def catalogue_versions_bump_on_commit(*, team_ids: Iterable[int], reason: str) -> None:
    """Bump the teams' versions inside the current transaction, with the change itself, and
    mirror them into the cache once it commits.

    Before commit the cached states become pending markers of the new versions; if the cache does
    not take them, the cache epoch moves in this same transaction. So the database can never hold
    a change that the cache can hide, whatever happens to the cache or this process afterwards.
    """
    ids = sorted(set(team_ids))
    if not ids:
        return
    logger.debug("catalogue versions of teams %s bumped: %s", ids, reason)
    Team.objects.filter(pk__in=ids).update(catalogue_version=F("catalogue_version") + 1)
    pending = {
        team_id: CatalogueState(version=version, valid_until=None, pending=True)
        for team_id, version in Team.objects.filter(pk__in=ids).values_list(
            "pk", "catalogue_version"
        )
    }
    cache = catalogue_cache()
    if cache is None or not _states_set_if_newer(cache, pending, ttl=PENDING_STATE_SECONDS):
        cache_epoch_bump(reason=f"{reason}: the cache did not take the new versions of {ids}")
    transaction.on_commit(lambda: _mirror(ids))


def catalogue_versions_bump(*, team_ids: Iterable[int], reason: str) -> None:
    """Bump the teams' versions now (in a transaction of their own) and mirror the new states.

    For changes already committed (the visibility signal arrives after commit). `reason` names
    the change, for logs and tests.
    """
    with transaction.atomic():
        catalogue_versions_bump_on_commit(team_ids=team_ids, reason=reason)


def teams_granted_servers(server_ids: Iterable[int]) -> list[int]:
    """Teams holding a grant (of the server or of one of its tools) on any of these servers."""
    return sorted(
        set(
            Grant.objects.filter(server_id__in=list(server_ids), revoked_at__isnull=True)
            .values_list("team_id", flat=True)
            .distinct()
        )
    )
