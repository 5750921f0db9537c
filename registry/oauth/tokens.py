"""People's tokens on the wire: their format, the resource they are bound to, and the cached lookup
that turns one into a `PersonIdentity` (or says exactly why it cannot).

More: docs/authentication.md, "Module notes"."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Subquery

from registry.catalogue.formats import gateway_url
from registry.catalogue.versions import catalogue_state_cached
from registry.core.cache import CatalogueCache, cache_epoch_bump, catalogue_cache
from registry.teams.callers import PersonIdentity, PersonStanding
from registry.teams.models import Membership, MembershipLevel
from registry.teams.signals import announce_team_change
from registry.upstream.models import UpstreamAccount

logger = logging.getLogger(__name__)

ACCESS_TOKEN_PREFIX = "tra"  # noqa: S105 (the public marker)
REFRESH_TOKEN_PREFIX = "trr"  # noqa: S105
ACCESS_TOKEN_RE = re.compile(r"^tra_[A-Za-z0-9_-]{43}$")
LOOKUP_CACHE_SECONDS = 300

# Why a person's token is refused: the `error_description` of the gateway's 401 (RFC 6750).
MISSING = "missing"
MALFORMED = "malformed"
UNKNOWN = "unknown"
EXPIRED = "expired"
REVOKED = "revoked"
WRONG_AUDIENCE = "wrong_audience"
DESCRIPTIONS = {
    MISSING: "No access token was sent: sign in to Toolroom (OAuth) or send an agent token as "
    "'Authorization: Bearer ...'.",
    MALFORMED: "The bearer token is malformed: it is neither a Toolroom access token (tra_...) "
    "nor an agent token (trm_...).",
    UNKNOWN: "The access token is not one Toolroom issued (or it was removed).",
    EXPIRED: "The access token has expired; refresh it or sign in again.",
    REVOKED: "The access token was revoked (signed out, refreshed, or the app's access was "
    "revoked); sign in again.",
    WRONG_AUDIENCE: "The access token was issued for another resource, not this gateway.",
}


class PersonTokenRejected(Exception):
    """The person's token is not good now; `code` is one of the constants above."""

    def __init__(self, code: str) -> None:
        super().__init__(DESCRIPTIONS[code])
        self.code = code
        self.description = DESCRIPTIONS[code]


def access_token_generate(request: Any) -> str:
    """The toolkit's ACCESS_TOKEN_GENERATOR."""
    return f"{ACCESS_TOKEN_PREFIX}_{secrets.token_urlsafe(32)}"


def refresh_token_generate(request: Any) -> str:
    """The toolkit's REFRESH_TOKEN_GENERATOR."""
    return f"{REFRESH_TOKEN_PREFIX}_{secrets.token_urlsafe(32)}"


def is_access_token(plain: str) -> bool:
    return plain.startswith(f"{ACCESS_TOKEN_PREFIX}_")


def token_checksum(plain: str) -> str:
    return hashlib.sha256(plain.encode("utf-8")).hexdigest()


def gateway_resource_url() -> str:
    """The gateway's resource identifier (RFC 8707, RFC 9728): its MCP endpoint, without the
    trailing slash (clients treat both forms as the same resource)."""
    return gateway_url(settings.TOOLROOM_PUBLIC_URL).rstrip("/")


def resource_canonical(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def resource_is_gateway(url: str) -> bool:
    return resource_canonical(url) == resource_canonical(gateway_resource_url())


def lookup_key(checksum: str, *, cache: CatalogueCache) -> str:
    return cache.key(f"person-token:{checksum[:40]}")


def _entry_from_db(checksum: str) -> dict[str, Any] | None:
    from registry.oauth.models import AccessToken  # noqa: PLC0415

    membership = Membership.objects.filter(
        team_id=OuterRef("authorization__team_id"), user_id=OuterRef("user_id")
    )
    listed_role = Membership.roles.through.objects.filter(
        membership__team_id=OuterRef("authorization__team_id"),
        membership__user_id=OuterRef("user_id"),
        teamrole_id=OuterRef("authorization__role_id"),
    )
    row = (
        AccessToken.objects.filter(token_checksum=checksum, authorization__isnull=False)
        .annotate(
            membership_level=Subquery(membership.values("level")[:1]),
            role_listed=Exists(listed_role),
        )
        .values(
            "pk",
            "expires",
            "revoked_at",
            "resource",
            "user_id",
            "user__username",
            "user__is_active",
            "application_id",
            "application__name",
            "application__client_id",
            "authorization_id",
            "authorization__revoked_at",
            "authorization__team_id",
            "authorization__team__slug",
            "authorization__team__catalogue_version",
            "authorization__role_id",
            "authorization__role__name",
            "membership_level",
            "role_listed",
        )
        .first()
    )
    if row is None:
        return None
    level = row["membership_level"]
    accounts = UpstreamAccount.objects.filter(person_id=row["user_id"]).values_list(
        "server__slug", "state"
    )
    return {
        "id": row["pk"],
        "expires_at": row["expires"].timestamp(),
        "revoked": row["revoked_at"] is not None,
        "resource": list(row["resource"] or []),
        "person_id": row["user_id"],
        "person_name": row["user__username"],
        "active": bool(row["user__is_active"]),
        "member": level is not None,
        "role_allowed": level == MembershipLevel.OWNER or bool(row["role_listed"]),
        "client_id": row["application_id"],
        "client_name": row["application__name"] or row["application__client_id"],
        "authorization_id": row["authorization_id"],
        "authorization_active": row["authorization__revoked_at"] is None,
        "team_id": row["authorization__team_id"],
        "team_slug": row["authorization__team__slug"],
        "role_id": row["authorization__role_id"],
        "role_name": row["authorization__role__name"],
        "version": row["authorization__team__catalogue_version"],
        "upstream_accounts": [[slug, state] for slug, state in accounts],
    }


def identity_from_person_entry(entry: dict[str, Any], now: float) -> PersonIdentity:
    """Check a looked-up entry; PersonTokenRejected unless the token itself is good at `now`.
    (The person's standing is carried in the identity: the call check's rule judges it.)"""
    if entry["revoked"]:
        raise PersonTokenRejected(REVOKED)
    if entry["expires_at"] <= now:
        raise PersonTokenRejected(EXPIRED)
    if not any(resource_is_gateway(resource) for resource in entry["resource"]):
        raise PersonTokenRejected(WRONG_AUDIENCE)
    return PersonIdentity(
        token_id=entry["id"],
        person_id=entry["person_id"],
        person_name=entry["person_name"],
        team_id=entry["team_id"],
        role_id=entry["role_id"],
        client_id=entry["client_id"],
        client_name=entry["client_name"],
        authorization_id=entry["authorization_id"],
        expires_at=entry["expires_at"],
        standing=PersonStanding(
            active=entry["active"],
            member=entry["member"],
            role_allowed=entry["role_allowed"],
            authorization_active=entry["authorization_active"],
        ),
        team_slug=entry["team_slug"],
        role_name=entry["role_name"],
        upstream_accounts={
            str(slug): str(state) for slug, state in entry.get("upstream_accounts", [])
        },
    )


@dataclass(frozen=True)
class PersonLookup:
    identity: PersonIdentity
    version: int  # the team's catalogue version the person's standing was read at


def person_token_authenticate(plain: str, *, cached_version: int | None = None) -> PersonLookup:
    """The person behind an access token, or PersonTokenRejected; no query while the cached entry
    was read at the team's current version.

    `cached_version`: the team's version as the caller just read it from the cache, if it did;
    else it is read here (one more cache read)."""
    if not ACCESS_TOKEN_RE.match(plain):
        raise PersonTokenRejected(MALFORMED)
    checksum = token_checksum(plain)
    cache = catalogue_cache()
    entry = None
    if cache is not None:
        found = cache.get(lookup_key(checksum, cache=cache))
        if found is not None and cache.intact():
            version = cached_version
            if version is None:
                state = catalogue_state_cached(team_id=found["team_id"])
                version = state.version if state is not None else None
            if version is not None and version == found["version"]:
                entry = found
    if entry is None:
        entry = _entry_from_db(checksum)
        if entry is None:
            raise PersonTokenRejected(UNKNOWN)
        if cache is not None:
            ttl = max(1.0, min(LOOKUP_CACHE_SECONDS, entry["expires_at"] - time.time()))
            cache.set(lookup_key(checksum, cache=cache), entry, ttl)
    return PersonLookup(identity_from_person_entry(entry, time.time()), entry["version"])


# Set while a refresh rotates its tokens: the predecessor's revocation then only evicts its cached
# lookup (docs/authentication.md, "Token lifetimes"); any other revocation also moves the team's
# version so every gateway process checks the person's tokens again at once.
rotating: contextvars.ContextVar[bool] = contextvars.ContextVar("oauth_rotating", default=False)


def access_tokens_forget(*, access_token_ids: list[int]) -> list[int]:
    """Drop the cached lookups of these access tokens, now and after commit (moving the cache
    epoch if the cache does not take it). Returns the teams the tokens acted for."""
    if not access_token_ids:
        return []
    from registry.oauth.models import AccessToken  # noqa: PLC0415

    rows = list(
        AccessToken.objects.filter(pk__in=access_token_ids).values_list(
            "token_checksum", "authorization__team_id"
        )
    )
    checksums = [checksum for checksum, _ in rows if checksum]

    def evict() -> None:
        cache = catalogue_cache()
        if checksums and (
            cache is None
            or not cache.delete_many([lookup_key(checksum, cache=cache) for checksum in checksums])
        ):
            cache_epoch_bump(reason="the cache did not drop revoked people's tokens")

    evict()
    transaction.on_commit(evict)
    return sorted({team_id for _, team_id in rows if team_id is not None})


def access_tokens_revoked(*, access_token_ids: list[int], family: bool = False) -> None:
    """These access tokens were just revoked: forget their cached lookups and, unless a refresh
    is rotating its own predecessor, bump their teams' versions."""
    teams = access_tokens_forget(access_token_ids=access_token_ids)
    if family or not rotating.get():
        announce_team_change(
            team_ids=teams, reason="oauth.family_revoked" if family else "oauth.token_revoked"
        )
