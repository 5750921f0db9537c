"""Who calls the gateway, as the registry checks it: an agent token (`trm_...`) or a person's
OAuth access token (`tra_...`), and what the 401 says when it is neither good nor given."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from registry.oauth.tokens import (
    DESCRIPTIONS,
    MALFORMED,
    MISSING,
    UNKNOWN,
    PersonTokenRejected,
    is_access_token,
    person_token_authenticate,
)
from registry.teams.callers import Caller
from registry.teams.tokens import (
    TOKEN_PREFIX,
    AgentIdentity,
    TokenRejected,
    token_authenticate,
    token_mark_used,
)

logger = logging.getLogger(__name__)

# The 401's error_description when no token was sent, or one no check could name.
NO_TOKEN = DESCRIPTIONS[MISSING]
NOT_A_TOKEN = DESCRIPTIONS[UNKNOWN]
# Why an agent token was refused, as the 401 says it (`TokenRejected.reason` -> description).
_AGENT_REFUSALS = {
    "malformed": DESCRIPTIONS[MALFORMED],
    "unknown prefix": "The agent token is not one Toolroom issued (or it was deleted).",
    "wrong secret": "The agent token is not one Toolroom issued (or it was deleted).",
    "revoked": "The agent token was revoked.",
    "expired": "The agent token has expired.",
}


class CallerRefused(Exception):
    """The bearer token is not good: `description` is the 401's error_description, `reason`
    what the failure count files it under (`TokenRejected.reason`, or a person's token's code)."""

    def __init__(self, description: str, reason: str = "malformed") -> None:
        super().__init__(description)
        self.description = description
        self.reason = reason


@dataclass(frozen=True)
class CheckedCaller:
    caller: Caller
    # The team's catalogue version the token (and a person's standing) is known good at; None:
    # not known (an agent token checked without a version read first).
    version: int | None


def _agent(plain: str) -> AgentIdentity:
    try:
        identity = token_authenticate(plain)
    except TokenRejected as exc:
        logger.info("gateway: agent token refused: %s", exc.reason)
        description = _AGENT_REFUSALS.get(exc.reason, NOT_A_TOKEN)
        raise CallerRefused(description, exc.reason) from exc
    token_mark_used(identity, may_write_database=False)
    return identity


def caller_check(*, plain: str, cached_version: int | None) -> CheckedCaller:
    """The caller behind a bearer token (an agent's last use recorded), or CallerRefused.
    `cached_version`: the team's version the gateway read from the cache before this check,
    if it did (an agent token is then known good at it)."""
    if is_access_token(plain):
        try:
            lookup = person_token_authenticate(plain, cached_version=cached_version)
        except PersonTokenRejected as exc:
            logger.info("gateway: person's token refused: %s", exc.code)
            raise CallerRefused(exc.description, exc.code) from exc
        return CheckedCaller(lookup.identity, lookup.version)
    if plain.startswith(f"{TOKEN_PREFIX}_"):
        return CheckedCaller(_agent(plain), cached_version)
    raise CallerRefused(DESCRIPTIONS[MALFORMED])


def caller_still_good(*, plain: str) -> bool:
    """Whether the token behind a long-lived stream may still listen: an agent token still good,
    or a person's token still good and the person still standing (member, active, authorized)."""
    if is_access_token(plain):
        try:
            return person_token_authenticate(plain).identity.standing.good
        except PersonTokenRejected:
            return False
    try:
        _agent(plain)
    except CallerRefused:
        return False
    return True
