"""Rendered catalogue documents: their ETags and their cache entries.

An ETag is derived from the team's catalogue version, the agent's role and the variant asked for
(format, filters, page, the agent's declared servers); a document is cached under its ETag, so a
new version makes every older document unreachable at once. Documents live
TOOLROOM_CATALOGUE_CACHE_SECONDS (0 turns the document cache off; the ETags and 304s stay).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.http import parse_etags

from registry.catalogue.versions import CatalogueState
from registry.core.cache import catalogue_cache
from registry.teams.callers import Caller, PersonIdentity


@dataclass(frozen=True)
class CatalogueDocument:
    etag: str
    body: bytes
    from_cache: bool


def declarations_digest(identity: Caller) -> str:
    if not identity.declared_servers:
        return ""
    canonical = json.dumps(identity.declared_servers, sort_keys=True, separators=(",", ":"))
    return f"{identity.token_id}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def accounts_digest(identity: Caller) -> str:
    """What a per-person tool's account mark depends on (registry/catalogue/formats.py,
    `upstream_mark`): an agent, or a person's linked and broken accounts (read at the team's
    version with their token). People with the same accounts share documents."""
    if not isinstance(identity, PersonIdentity):
        return "agent"
    if not identity.upstream_accounts:
        return "person"
    canonical = json.dumps(sorted(identity.upstream_accounts.items()), separators=(",", ":"))
    return f"person:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def tools_variant(*, fmt: str, category: str | None, identity: Caller) -> str:
    """What, besides the version, tells one tools document from another."""
    declared = declarations_digest(identity) if fmt == "native" else ""
    accounts = accounts_digest(identity)  # every format carries the account marks
    return f"tools|{fmt}|{category or ''}|{declared}|{accounts}"


def etag_matches(held: str, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weak comparison, as RFC 9110 asks)."""
    if not held:
        return False
    return held.strip() == "*" or etag in parse_etags(held)


def document_key(etag: str) -> str:
    return f"catalogue-doc:{etag.strip(chr(34))}"


def catalogue_etag(*, identity: Caller, state: CatalogueState, variant: str) -> str:
    """A strong ETag for this agent's view of the catalogue at this version."""
    material = "|".join(
        [
            str(identity.team_id),
            str(identity.role_id),
            str(state.version),
            variant,
            "hide" if settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY else "flag",
            settings.TOOLROOM_PUBLIC_URL,
        ]
    )
    digest = hashlib.sha256(material.encode()).hexdigest()[:24]
    return f'"{state.version}-{digest}"'


def catalogue_document(*, etag: str, build: Callable[[], Any]) -> CatalogueDocument:
    """The document for `etag`, from the cache or built (and cached) now; `build` gives it as
    JSON-ready data or already encoded (bytes)."""
    ttl = settings.TOOLROOM_CATALOGUE_CACHE_SECONDS
    key = document_key(etag)
    cache = catalogue_cache() if ttl > 0 else None
    if cache is not None:
        body = cache.get(key)
        if body is not None:
            return CatalogueDocument(etag=etag, body=body, from_cache=True)
    built = build()
    body = (
        built
        if isinstance(built, bytes)
        else json.dumps(built, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    )
    if cache is not None:
        cache.set(key, body, ttl)
    return CatalogueDocument(etag=etag, body=body, from_cache=False)
