"""`GET /api/v1/catalogue`, what both of its doors share: one parameter spec, one answer, one set
of answer headers. The DRF view (registry/api/views/catalogue.py) and the ASGI fast path
(registry/api/fastpath.py) both read the parameters with `CatalogueQuerySerializer`'s fields,
build the body with `catalogue_query_document` and send `catalogue_headers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from rest_framework import serializers

from registry.catalogue.documents import (
    CatalogueDocument,
    accounts_digest,
    catalogue_document,
    tools_variant,
)
from registry.catalogue.formats import TOOL_FORMATS
from registry.catalogue.fragments import tools_document_body
from registry.catalogue.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_LENGTH,
    MAX_SEARCH_LIMIT,
    SearchRequest,
    search_document,
    search_variant,
)
from registry.catalogue.versions import CatalogueState
from registry.teams.callers import Caller

# Set on answers made without the cache (it is down or its circuit is open): correct, but slower.
DEGRADED_HEADER = "X-Toolroom-Degraded"
# A parameter that only means something with another one.
NEEDS = {"limit": ("q", "limit applies to a search: give q too.")}
BLANK_QUERY = "Give the words to search for."


class CatalogueQuerySerializer(serializers.Serializer[Any]):
    """The catalogue's query parameters: the one spec of both doors (and of the API schema)."""

    format = serializers.ChoiceField(choices=TOOL_FORMATS, default="native")
    category = serializers.SlugField(required=False, max_length=60)
    q = serializers.CharField(
        required=False,
        max_length=MAX_QUERY_LENGTH,
        help_text="Search: only the tools matching these words, best first.",
    )
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_SEARCH_LIMIT,
        help_text=f"With q: at most this many tools (default {DEFAULT_SEARCH_LIMIT}).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # DRF reads an empty query parameter as absent: `?q=` would be the whole catalogue.
        if "q" in self.initial_data and not attrs.get("q", "").strip():
            raise serializers.ValidationError({"q": BLANK_QUERY})
        for name, (needed, message) in NEEDS.items():
            if name in attrs and needed not in attrs:
                raise serializers.ValidationError({name: message})
        return attrs


@dataclass(frozen=True)
class CatalogueQuery:
    """What an agent asked the catalogue for."""

    fmt: str
    category: str | None
    search: SearchRequest | None

    def variant(self, identity: Caller) -> str:
        """What, besides the team's version, tells this answer from another (its ETag's part)."""
        if self.search is None:
            return tools_variant(fmt=self.fmt, category=self.category, identity=identity)
        return search_variant(
            fmt=self.fmt,
            category=self.category,
            query=self.search.text,
            limit=self.search.limit,
            terms=self.search.terms,
            accounts=accounts_digest(identity),
        )


def catalogue_query(validated: Mapping[str, Any]) -> CatalogueQuery:
    """The query the serializer validated."""
    search = None
    if "q" in validated:
        search = SearchRequest(
            text=validated["q"], limit=validated.get("limit", DEFAULT_SEARCH_LIMIT)
        )
    return CatalogueQuery(
        fmt=validated["format"], category=validated.get("category"), search=search
    )


_FIELDS = CatalogueQuerySerializer().fields


def catalogue_query_plain(raw: bytes) -> CatalogueQuery | None:
    """The query of a plain query string, read with the serializer's own fields as the view
    reads it; None when it is not plain (not ASCII, a name twice or unknown, an empty or invalid
    value, a value the view would read as another: `limit=03`), which the view then answers."""
    if not raw.isascii():  # Django decodes such a query its own way
        return None
    try:
        pairs = parse_qsl(raw.decode("ascii"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:  # percent-escapes that are not UTF-8
        return None
    given = dict(pairs)
    if len(given) != len(pairs) or not given.keys() <= _FIELDS.keys():
        return None
    validated: dict[str, Any] = {}
    for name, value in given.items():
        field = _FIELDS[name]
        if not value:  # DRF reads it as absent, or refuses it
            return None
        try:
            validated[name] = field.run_validation(value)
        except serializers.ValidationError:
            return None
        if isinstance(field, serializers.IntegerField) and str(validated[name]) != value:
            return None
    if "q" in validated and not validated["q"]:
        return None
    if any(name in validated and needed not in validated for name, (needed, _) in NEEDS.items()):
        return None
    validated.setdefault("format", _FIELDS["format"].get_default())
    return catalogue_query(validated)


def catalogue_query_document(
    *, identity: Caller, state: CatalogueState, query: CatalogueQuery, etag: str
) -> CatalogueDocument:
    """The answer's document for `etag`, from the document cache or built (and kept) now;
    UnknownRole when the token's role or team is gone."""
    search = query.search
    if search is not None:
        return catalogue_document(
            etag=etag,
            build=lambda: search_document(
                fmt=query.fmt,
                team_id=identity.team_id,
                role_id=identity.role_id,
                category=query.category,
                search=search,
                version=state.version,
                caller=identity,
            ),
        )
    with_preflight = query.fmt == "native" and bool(identity.declared_servers)
    return catalogue_document(
        etag=etag,
        build=lambda: tools_document_body(
            fmt=query.fmt,
            team_id=identity.team_id,
            role_id=identity.role_id,
            version=state.version,
            category=query.category,
            declared_servers=identity.declared_servers if with_preflight else None,
            caller=identity,
        ),
    )


def catalogue_headers(*, etag: str, degraded: bool | str | None) -> list[tuple[str, str]]:
    """The headers of every catalogue answer, 200 or 304, whichever door answers it (`degraded`:
    True or "cache" without the cache, "database" from the last confirmed state)."""
    headers = [("ETag", etag), ("Cache-Control", "private, no-cache"), ("Vary", "Authorization")]
    if degraded:
        headers.append((DEGRADED_HEADER, "cache" if degraded is True else str(degraded)))
    return headers
