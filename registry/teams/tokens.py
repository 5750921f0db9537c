"""Agent tokens on the wire: their format, hashing, the cached lookup and the last-used time.

More: docs/authentication.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from registry.core.cache import (
    CatalogueCache,
    cache_epoch_bump,
    catalogue_cache,
    database_degraded,
)

TOKEN_PREFIX = "trm"  # noqa: S105 (the public marker)
PREFIX_HEX_CHARS = 12
SECRET_BYTES = 32
TOKEN_RE = re.compile(r"^trm_(?P<prefix>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})$")

# How long a looked-up token stays in the cache; revocation evicts it sooner.
LOOKUP_CACHE_SECONDS = 300
LAST_USED_FLUSH_SECONDS = 60
# Each process tells the cache about a token's use at most this often (the moment is exact to it).
LAST_USED_CACHE_SECONDS = 1.0
_last_told: dict[int, float] = {}


def token_lookup_key(prefix: str, *, cache: CatalogueCache) -> str:
    """The token's cached lookup, under the cache's current epoch."""
    return cache.key(f"agent-token:{prefix}")


def token_unknown_key(prefix: str, *, cache: CatalogueCache) -> str:
    """Marks a prefix no token has (kept apart from the lookup, which the fast path reads), under
    the cache's current epoch like the lookup."""
    return cache.key(f"agent-token-unknown:{prefix}")


# How long an unknown prefix is remembered: guesses with made-up prefixes hit the cache, not
# the database. A new token's prefix is random (and evicted from here when it is created).
UNKNOWN_PREFIX_CACHE_SECONDS = 60


def token_last_used_key(token_id: int) -> str:
    return f"agent-token-used:{token_id}"


def _flush_key(token_id: int) -> str:
    return f"agent-token-flushed:{token_id}"


@dataclass(frozen=True)
class NewToken:
    prefix: str
    plain: str
    secret_hash: str


def token_hash(plain: str) -> str:
    return hashlib.sha256(plain.encode("utf-8")).hexdigest()


def token_generate() -> NewToken:
    prefix = secrets.token_hex(PREFIX_HEX_CHARS // 2)
    plain = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return NewToken(prefix=prefix, plain=plain, secret_hash=token_hash(plain))


def token_parse(plain: str) -> str | None:
    """The prefix of a well-formed token, else None."""
    match = TOKEN_RE.match(plain)
    return match.group("prefix") if match else None


@dataclass(frozen=True)
class AgentIdentity:
    """Who an authenticated agent is: what the catalogue needs, nothing it must look up."""

    token_id: int
    name: str
    team_id: int
    role_id: int
    expires_at: float | None  # POSIX seconds
    declared_servers: dict[str, list[str]] = field(default_factory=dict)
    tool_exposure: str = ""  # "" follows the team's default

    @property
    def label(self) -> str:
        return f"agent:{self.name}"


class TokenRejected(Exception):
    """The token is unknown, wrong, revoked or expired; `reason` is for logs, never the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _entry_from_db(prefix: str) -> dict[str, Any] | None:
    from registry.teams.models import AgentToken  # noqa: PLC0415

    row = (
        AgentToken.objects.filter(prefix=prefix)
        .values(
            "pk",
            "name",
            "team_id",
            "role_id",
            "secret_hash",
            "expires_at",
            "revoked_at",
            "declared_servers",
            "tool_exposure",
        )
        .first()
    )
    if row is None:
        return None
    return {
        "id": row["pk"],
        "name": row["name"],
        "team_id": row["team_id"],
        "role_id": row["role_id"],
        "hash": row["secret_hash"],
        "expires_at": row["expires_at"].timestamp() if row["expires_at"] else None,
        "revoked": row["revoked_at"] is not None,
        "declared": row["declared_servers"] or {},
        "exposure": row["tool_exposure"],
    }


def identity_from_entry(entry: dict[str, Any], plain: str, now: float) -> AgentIdentity:
    """Check `plain` against a looked-up entry; TokenRejected unless it is good at `now`.

    Shared by the request path and the catalogue's ASGI fast path, so both decide alike.
    """
    if not hmac.compare_digest(entry["hash"], token_hash(plain)):
        raise TokenRejected("wrong secret")
    if entry["revoked"]:
        raise TokenRejected("revoked")
    if entry["expires_at"] is not None and entry["expires_at"] <= now:
        raise TokenRejected("expired")
    return AgentIdentity(
        token_id=entry["id"],
        name=entry["name"],
        team_id=entry["team_id"],
        role_id=entry["role_id"],
        expires_at=entry["expires_at"],
        declared_servers=entry["declared"],
        tool_exposure=entry.get("exposure", ""),
    )


def token_authenticate(plain: str) -> AgentIdentity:
    """The identity behind `plain`, or TokenRejected; no query when the lookup is cached."""
    prefix = token_parse(plain)
    if prefix is None:
        raise TokenRejected("malformed")
    cache = catalogue_cache()
    entry = None
    unknown = False
    if cache is not None:
        key = token_lookup_key(prefix, cache=cache)
        unknown_key = token_unknown_key(prefix, cache=cache)
        found = cache.get_many([key, unknown_key])
        if found and cache.intact():
            entry = found.get(key)
            unknown = bool(found.get(unknown_key))
    if entry is None:
        if unknown:
            raise TokenRejected("unknown prefix")
        entry = _entry_from_db(prefix)
        if entry is None:
            if cache is not None:
                cache.set(token_unknown_key(prefix, cache=cache), 1, UNKNOWN_PREFIX_CACHE_SECONDS)
            raise TokenRejected("unknown prefix")
        if cache is not None:
            cache.set(key, entry, LOOKUP_CACHE_SECONDS)
    return identity_from_entry(entry, plain, time.time())


def _lookup_evict(prefix: str) -> bool:
    cache = catalogue_cache()
    return cache is not None and cache.delete_many(
        [token_lookup_key(prefix, cache=cache), token_unknown_key(prefix, cache=cache)]
    )


def token_lookup_evict_on_commit(prefix: str) -> None:
    """Drop the cached lookup (and any "unknown prefix" mark) now and again once the revocation
    (or change) is committed (a reader may have cached the old row in between). When the cache
    does not take either, the cache epoch moves: before commit in the same transaction, after
    commit on its own."""
    if not _lookup_evict(prefix):
        cache_epoch_bump(reason=f"the cache did not drop the lookup of token {prefix}")

    def after_commit() -> None:
        if not _lookup_evict(prefix):
            cache_epoch_bump(reason=f"the cache did not drop the lookup of token {prefix}")

    transaction.on_commit(after_commit)


def last_use_due(token_id: int, now: float) -> bool:
    """Whether this process should tell the cache about the token's use now (once a second)."""
    if now - _last_told.get(token_id, 0.0) < LAST_USED_CACHE_SECONDS:
        return False
    _last_told[token_id] = now
    return True


def token_mark_used(identity: AgentIdentity, *, may_write_database: bool) -> None:
    """Record that the agent just used its token.

    The cache gets the moment (at most once a second per token and process). The row gets it at
    most once a minute per token, and only when the caller says a database write is fine
    (requests that already read the database).
    """
    now = time.time()
    if not last_use_due(identity.token_id, now):
        return
    cache = catalogue_cache()
    if cache is not None:
        cache.set(token_last_used_key(identity.token_id), now, None)
    # Without the cache (degraded) the row is written at most once a second per process instead;
    # while the database is away, not at all (the cache has the moment).
    if (
        may_write_database
        and not database_degraded()
        and (
            cache is None
            or cache.add(_flush_key(identity.token_id), 1, LAST_USED_FLUSH_SECONDS) is not False
        )
    ):
        from registry.teams.models import AgentToken  # noqa: PLC0415

        AgentToken.objects.filter(pk=identity.token_id).update(
            last_used_at=datetime.fromtimestamp(now, tz=UTC)
        )


def tokens_last_used(token_ids: list[int]) -> dict[int, datetime]:
    """The freshest last-used moments the cache knows, by token id."""
    cache = catalogue_cache()
    if cache is None:
        return {}
    found = cache.get_many([token_last_used_key(token_id) for token_id in token_ids])
    return {
        token_id: datetime.fromtimestamp(found[token_last_used_key(token_id)], tz=UTC)
        for token_id in token_ids
        if token_last_used_key(token_id) in found
    }
