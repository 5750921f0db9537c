"""Refused agent tokens, counted per client address and token prefix: 401, then 429.

More: docs/authentication.md, "Module notes".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from django.conf import settings

from registry.core.cache import catalogue_cache
from registry.teams.tokens import token_parse

# Reasons (TokenRejected.reason) for a token whose prefix belongs to a real token.
_PREFIX_KNOWN_REASONS = frozenset({"wrong secret", "revoked", "expired"})
_GUESSES = "-"  # the bucket of made-up prefixes and malformed tokens
_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_RATE = re.compile(r"^\s*(?P<count>\d+)\s*/\s*(?P<period>[a-z]+)\s*$")


@dataclass(frozen=True)
class FailureRate:
    limit: int
    window_seconds: int


def token_failure_rate() -> FailureRate:
    """TOOLROOM_THROTTLE_TOKEN_FAILURES as a count per window ("30/min")."""
    text = str(settings.TOOLROOM_THROTTLE_TOKEN_FAILURES)
    match = _RATE.match(text.lower())
    if match is None or match["period"] not in _PERIODS:
        raise ValueError(
            f"TOOLROOM_THROTTLE_TOKEN_FAILURES={text!r} is not <count>/<s|min|hour|day>."
        )
    return FailureRate(limit=int(match["count"]), window_seconds=_PERIODS[match["period"]])


def token_failure_bucket(*, address: str, plain: str, reason: str) -> str:
    """The cache key a refused token is counted under."""
    prefix = token_parse(plain) if reason in _PREFIX_KNOWN_REASONS else None
    return f"token-failures:{address}:{prefix or _GUESSES}"


def token_failure_count(*, address: str, plain: str, reason: str) -> float | None:
    """Count one refused token from `address`. Returns the seconds to wait when its bucket was
    already past the rate (answer 429, and this one is not counted: the window moves on), or
    None (answer 401)."""
    rate = token_failure_rate()
    cache = catalogue_cache()
    if cache is None:
        return None
    key = token_failure_bucket(address=address, plain=plain, reason=reason)
    now = time.time()
    history: list[float] = [
        float(moment) for moment in cache.get(key) or [] if moment > now - rate.window_seconds
    ]
    if len(history) >= rate.limit:
        return max(0.0, rate.window_seconds - (now - min(history)))
    history.append(now)
    cache.set(key, history, rate.window_seconds)
    return None
