"""Quotas at the gateway, the control-plane half: each team's limits (its `TeamQuota` over the
`TOOLROOM_QUOTA_*` defaults), who a caller is for them, the Redis keys every gateway process counts
in, the audit of a limit hit and the hits `/metrics` reports. The gateway enforces them
(workers/gateway/quotas.py; docs/gateway.md, "Quotas").
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from registry.audit.services import Actor, audit_record
from registry.catalogue.versions import catalogue_state
from registry.core.process_cache import VersionedCache
from registry.gateway.models import TeamQuota
from registry.teams.callers import Caller, PersonIdentity
from registry.teams.models import Team
from registry.teams.signals import announce_team_change

logger = logging.getLogger(__name__)

QUOTA_EXCEEDED = "quota_exceeded"
QUOTA_FIELDS = (
    "sessions_per_team",
    "sessions_per_caller",
    "calls_per_minute_per_team",
    "calls_per_minute_per_caller",
    "concurrent_calls_per_team",
    "concurrent_calls_per_caller",
)
# How each limit is named in a refusal ("... the team's limit of 5 open sessions ...").
LIMIT_WORDS = {
    "sessions_per_team": "the team's limit of {n} open sessions",
    "sessions_per_caller": "this caller's limit of {n} open sessions",
    "calls_per_minute_per_team": "the team's limit of {n} calls a minute",
    "calls_per_minute_per_caller": "this caller's limit of {n} calls a minute",
    "concurrent_calls_per_team": "the team's limit of {n} concurrent calls",
    "concurrent_calls_per_caller": "this caller's limit of {n} concurrent calls",
}
HITS_KEY = "gateway-quota:hits"  # a hash: "<team id>|<limit>" -> hits since Redis started
_LIMITS_MAX = 4096


@dataclass(frozen=True)
class QuotaLimits:
    """One team's limits in force (0: none)."""

    sessions_per_team: int = 0
    sessions_per_caller: int = 0
    calls_per_minute_per_team: int = 0
    calls_per_minute_per_caller: int = 0
    concurrent_calls_per_team: int = 0
    concurrent_calls_per_caller: int = 0

    @property
    def limits_calls(self) -> bool:
        return any(
            (
                self.calls_per_minute_per_team,
                self.calls_per_minute_per_caller,
                self.concurrent_calls_per_team,
                self.concurrent_calls_per_caller,
            )
        )

    @property
    def limits_sessions(self) -> bool:
        return bool(self.sessions_per_team or self.sessions_per_caller)


def quota_defaults() -> QuotaLimits:
    """The limits of a team without quotas of its own (settings)."""
    return QuotaLimits(
        **{name: int(getattr(settings, f"TOOLROOM_QUOTA_{name.upper()}")) for name in QUOTA_FIELDS}
    )


def _limits_of(quota: TeamQuota | None) -> QuotaLimits:
    defaults = quota_defaults()
    if quota is None:
        return defaults
    values = {}
    for name in QUOTA_FIELDS:
        own = getattr(quota, name)
        values[name] = getattr(defaults, name) if own is None else int(own)
    return QuotaLimits(**values)


_limits: VersionedCache[int, QuotaLimits] = VersionedCache("team quotas", limit=_LIMITS_MAX)


def team_quota_limits(*, team_id: int, version: int | None = None) -> QuotaLimits:
    """The team's limits in force, kept in the process at the team's catalogue version (a change
    of quotas bumps it): no I/O when `version` is given and known, one query when it moves."""
    if version is None:
        version = catalogue_state(team_id=team_id).version
    found = _limits.get(team_id, version)
    if found is not None:
        return found
    quota = TeamQuota.objects.filter(team_id=team_id).first()
    return _limits.put(team_id, _limits_of(quota), version)


def team_quota_set(*, actor: Actor, team: Team, **values: int | None) -> TeamQuota:
    """Set a team's quotas (None: the default); audited, and the team's version is bumped so
    every gateway process reads them at its next call."""
    unknown = set(values) - set(QUOTA_FIELDS)
    if unknown:
        raise TypeError(f"unknown quota fields: {sorted(unknown)}")
    with transaction.atomic():
        quota, _ = TeamQuota.objects.select_for_update().get_or_create(team=team)
        before = {name: getattr(quota, name) for name in QUOTA_FIELDS}
        for name, value in values.items():
            setattr(quota, name, value)
        quota.full_clean()
        quota.save()
        after = {name: getattr(quota, name) for name in QUOTA_FIELDS}
        if before != after:
            audit_record(
                actor=actor,
                action="team.quota_changed",
                target=team,
                summary=f"Quotas of {team.slug} changed.",
                before=before,
                after=after,
            )
            announce_team_change(team_ids=[team.pk], reason="team.quota_changed")
    return quota


def quota_subject(identity: Caller) -> str:
    """Who a per-caller limit counts: the agent token, or the person (all of their apps)."""
    if isinstance(identity, PersonIdentity):
        return f"person:{identity.person_id}"
    return f"token:{identity.token_id}"


def quota_redis_url() -> str:
    """The Redis the quotas count in: the default cache's, when it is Redis (REDIS_URL); empty
    otherwise (the one gateway process of the embedded default counts alone)."""
    cache = settings.CACHES["default"]
    if str(cache.get("BACKEND", "")).endswith("RedisCache"):
        location = cache.get("LOCATION", "")
        return str(location[0] if isinstance(location, list | tuple) else location)
    return ""


def quota_key_prefix() -> str:
    """Where the gateway's quota keys live in Redis: under the cache's own prefix, so two
    installations (or bench runs) on one Redis never count each other."""
    prefix = str(settings.CACHES["default"].get("KEY_PREFIX", "") or "toolroom")
    return f"{prefix}:gateway-quota"


def quota_refusal_message(limit: str, value: int, retry_after: int) -> str:
    words = LIMIT_WORDS.get(limit, limit).format(n=value)
    return f"Quota exceeded: {words} ({limit}); retry in {retry_after} s."


def quota_hit_audit(
    *, identity: Caller, limit: str, value: int, what: str, retry_after: int
) -> None:
    """Record that a caller hit a limit (the gateway calls this at most once a minute per
    caller and limit; every hit is counted in the hits `/metrics` reports)."""
    team = Team.objects.filter(pk=identity.team_id).first()
    if team is None:
        return
    if isinstance(identity, PersonIdentity):
        label = f"person:{identity.person_name} (through {identity.client_name})"
    else:
        label = f"agent:{identity.name}"
    audit_record(
        actor=label,
        action="gateway.quota_exceeded",
        target=team,
        summary=f"{label} of {team.slug} was refused {what}: "
        + quota_refusal_message(limit, value, retry_after),
        details={
            "limit": limit,
            "value": value,
            "what": what,
            "caller": quota_subject(identity),
            "retry_after": retry_after,
        },
    )


def quota_hits() -> dict[tuple[str, str], int]:
    """(team slug, limit) -> hits counted in Redis by every gateway process since Redis started
    (empty without Redis: one process then counts alone, and its hits are in the audit)."""
    url = quota_redis_url()
    if not url:
        return {}
    import redis  # noqa: PLC0415

    client: Any = redis.Redis.from_url(url, socket_timeout=1.0)
    try:
        raw = client.hgetall(f"{quota_key_prefix()}:{HITS_KEY}")
    finally:
        client.close()
    by_team: dict[tuple[int, str], int] = {}
    for field, count in raw.items():
        team_id, _, limit = field.decode().partition("|")
        if team_id.isdigit():
            by_team[int(team_id), limit] = int(count)
    slugs = dict(
        Team.objects.filter(pk__in={team_id for team_id, _ in by_team}).values_list("pk", "slug")
    )
    return {
        (slugs.get(team_id, f"(deleted {team_id})"), limit): count
        for (team_id, limit), count in by_team.items()
    }


def quota_limits_as_dict(limits: QuotaLimits) -> dict[str, int]:
    return dataclasses.asdict(limits)
