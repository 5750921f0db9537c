"""Search in an agent's catalogue: its callable tools, ranked by relevance to a query.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from django.conf import settings

from registry.catalogue.formats import (
    render_tools,
    tool_entry_anthropic,
    tool_entry_mcp,
    tool_entry_openai,
    upstream_mark,
)
from registry.catalogue.selectors import Catalogue, CatalogueTool, catalogue_for_agent
from registry.core.process_cache import VersionedCache
from registry.search.index import document_fields
from registry.search.ranking import SearchDocument, SearchModel
from registry.search.selectors import tool_search_match
from registry.search.text import query_terms, weighted_query_terms
from registry.teams.callers import Caller

DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
MAX_QUERY_LENGTH = 500
# Catalogues kept per process for searching, keyed by the team's catalogue version (like the
# gateway's call tables): every change that alters a catalogue bumps the version, so an entry is
# exactly as fresh as a cached document. Searches then rank without rebuilding the catalogue.
CANDIDATES_MAX = 256
# Rendered search answers the ASGI fast path keeps in the process under their ETag (which holds
# the team's version), beside the copy in Redis: at most this many, each for at most
# TOOLROOM_CATALOGUE_CACHE_SECONDS, only while the document cache is on.
ANSWERS_MAX = 1024


# The formats whose search answer is `{"tools":[<entry>,...]}`, each entry a pure function of
# the tool as the kept catalogue holds it and the caller's account mark on it: encoded once per
# kept catalogue and mark (below).
_TOOL_ENTRIES: dict[str, Callable[[CatalogueTool, Caller | None], dict[str, Any]]] = {
    "mcp": tool_entry_mcp,
    "openai": tool_entry_openai,
    "anthropic": tool_entry_anthropic,
}


@dataclass(frozen=True)
class SearchableCatalogue:
    """An agent's catalogue, the ranking's statistics over its tools, and the tools' entries
    encoded so far (by format, tool id and the caller's account mark on it: a search answer's
    tools, encoded when first found)."""

    catalogue: Catalogue
    model: SearchModel
    by_id: dict[int, Any]
    encoded: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def tools_body(self, fmt: str, tools: Sequence[Any], caller: Caller | None = None) -> bytes:
        """`json.dumps(render_tools(fmt, ..., caller=caller))` for the MCP, OpenAI and Anthropic
        formats, the same bytes, each tool's entry encoded once for this catalogue and account
        mark (the kept catalogue of a version: a tool's entry cannot change under it)."""
        entry_of = _TOOL_ENTRIES[fmt]
        parts = []
        for tool in tools:
            mark = upstream_mark(tool.upstream_auth, tool.server_slug, caller)
            key = (fmt, tool.tool_id, *(() if mark is None else mark.values()))
            encoded = self.encoded.get(key)
            if encoded is None:
                encoded = _dumps(entry_of(tool, caller))
                self.encoded[key] = encoded  # a race writes the same text twice
            parts.append(encoded)
        return ('{"tools":[' + ",".join(parts) + "]}").encode()


def _dumps(value: Any) -> str:
    """JSON as catalogue documents are encoded (`registry.catalogue.documents`)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_candidates: VersionedCache[tuple[object, ...], SearchableCatalogue] = VersionedCache(
    "searchable catalogues", limit=CANDIDATES_MAX
)


def search_variant(
    *,
    fmt: str,
    category: str | None,
    query: str,
    limit: int,
    terms: Sequence[str] | None = None,
    accounts: str = "",
) -> str:
    """What tells one search answer from another besides the version: the format, the filter,
    the query's terms in any order (OR-ed, so `Read files` and `files, read` share an answer),
    the limit and what the caller's account marks depend on (`accounts`, the caller's
    `accounts_digest`). `terms` are the query's terms when the caller has them already."""
    terms = " ".join(sorted(query_terms(query) if terms is None else terms))
    digest = hashlib.sha256(terms.encode()).hexdigest()[:24]
    return f"search|{fmt}|{category or ''}|{limit}|{digest}|{accounts}"


_answers: VersionedCache[str, bytes] = VersionedCache("search answers", limit=ANSWERS_MAX)


def search_answer_kept(*, epoch: int, etag: str) -> bytes | None:
    """The search answer kept in this process for this ETag under this cache epoch, if any.

    The ETag holds the team's catalogue version (and the role, the query's terms, the format):
    a change that moves the version makes a new ETag, so a kept answer is as fresh as the
    document cached in Redis under the same ETag; the epoch keeps a restored database's
    repeated versions apart."""
    return _answers.get(etag, epoch)


def search_answer_keep(*, epoch: int, etag: str, body: bytes) -> None:
    """Keep a search answer (the document cached, or about to be, under `etag`)."""
    ttl = settings.TOOLROOM_CATALOGUE_CACHE_SECONDS
    if ttl > 0:
        _answers.put(etag, body, epoch, ttl=ttl)


def searchable(catalogue: Catalogue) -> SearchableCatalogue:
    """The catalogue with the ranking's statistics over its tools."""
    servers = {server.id: server for server in catalogue.servers}
    documents = []
    for tool in catalogue.tools:
        server = servers[tool.server_id]
        documents.append(
            SearchDocument(
                tool_id=tool.tool_id,
                name=tool.name,
                fields=document_fields(
                    name=tool.tool_name,
                    title=tool.title,
                    annotations=tool.annotations,
                    input_schema=tool.input_schema,
                    description=tool.description,
                    server_name=server.name,
                    server_slug=server.slug,
                    category_name=server.category_name,
                    category_slug=server.category_slug,
                ),
            )
        )
    return SearchableCatalogue(
        catalogue=catalogue,
        model=SearchModel(documents),
        by_id={tool.tool_id: tool for tool in catalogue.tools},
    )


def _catalogue_at(
    *, team_id: int, role_id: int, category: str | None, version: int | None
) -> SearchableCatalogue:
    if version is None:
        return searchable(catalogue_for_agent(team_id=team_id, role_id=role_id, category=category))
    key = (team_id, role_id, category, settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY)
    # One thread builds a version's catalogue; the others wait for it instead of building it
    # too (16 agents arriving after a version bump made 16 builds of a second each, at once).
    return _candidates.get_or_build(
        key,
        lambda: searchable(
            catalogue_for_agent(team_id=team_id, role_id=role_id, category=category)
        ),
        version,
    )


def kept_catalogue(*, team_id: int, role_id: int, version: int) -> Catalogue:
    """The agent's whole catalogue at this version, kept in the process like search's."""
    return _catalogue_at(team_id=team_id, role_id=role_id, category=None, version=version).catalogue


def catalogue_search(
    *,
    team_id: int,
    role_id: int,
    query: str,
    limit: int,
    category: str | None = None,
    version: int | None = None,
    weighted_terms: Sequence[tuple[str, float]] | None = None,
) -> Catalogue:
    """The agent's catalogue cut down to the tools matching `query`, best first, at most `limit`.

    Servers are those of the tools found (with their whole tool counts). With the team's
    catalogue `version` (from `catalogue_state`), the catalogue built for that version in this
    process is reused; without it, it is built now. `weighted_terms` are the query's
    (`weighted_query_terms`) when the caller has them already.
    """
    return _search_in(
        _catalogue_at(team_id=team_id, role_id=role_id, category=category, version=version),
        query=query,
        limit=limit,
        weighted_terms=weighted_terms,
    )


def _search_in(
    kept: SearchableCatalogue,
    *,
    query: str,
    limit: int,
    weighted_terms: Sequence[tuple[str, float]] | None,
) -> Catalogue:
    """`catalogue_search` in this kept catalogue."""
    catalogue = kept.catalogue
    # The thesaurus's stems for the query's terms no tool of this catalogue holds (ranking.py).
    weighted = kept.model.expanded(
        weighted_query_terms(query) if weighted_terms is None else weighted_terms
    )
    terms = [term for term, _ in weighted]
    if limit <= 0 or not terms or not catalogue.tools:
        return replace(catalogue, tools=[], servers=[])
    ranked = kept.model.rank(terms=weighted, matched=tool_search_match(terms=terms), limit=limit)
    tools = [kept.by_id[tool_id] for tool_id in ranked]
    found_servers = {tool.server_id for tool in tools}
    return replace(
        catalogue,
        tools=tools,
        servers=[server for server in catalogue.servers if server.id in found_servers],
    )


@dataclass(frozen=True)
class SearchRequest:
    """A search's parameters as the catalogue endpoint takes them (`q`, `limit`)."""

    text: str
    limit: int = DEFAULT_SEARCH_LIMIT

    @cached_property
    def weighted_terms(self) -> list[tuple[str, float]]:
        """The query's terms and weights (`weighted_query_terms`), made once per request."""
        return weighted_query_terms(self.text)

    @property
    def terms(self) -> list[str]:
        """The query's terms (`query_terms`)."""
        return [term for term, _ in self.weighted_terms]


def search_document(
    *,
    fmt: str,
    team_id: int,
    role_id: int,
    category: str | None,
    search: SearchRequest,
    version: int,
    caller: Caller | None = None,
) -> dict[str, Any] | bytes:
    """The answer to a search in `fmt`: what the view and the ASGI fast path both serve; encoded
    already (bytes) but for the native format, whose document says more than its tools.
    `caller`: whose account marks per-person tools carry (as in the tools documents)."""
    kept = _catalogue_at(team_id=team_id, role_id=role_id, category=category, version=version)
    found = _search_in(
        kept, query=search.text, limit=search.limit, weighted_terms=search.weighted_terms
    )
    if fmt in _TOOL_ENTRIES:
        return kept.tools_body(fmt, found.tools, caller)
    document = render_tools(fmt, found, version=version, preflight=None, caller=caller)
    if fmt == "native":
        # The terms, not the text: answers are shared by queries with the same terms.
        document["search"] = {
            "terms": sorted(search.terms),
            "limit": search.limit,
            "found": len(found.tools),
        }
    return document
