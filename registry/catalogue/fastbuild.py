"""Uncached catalogue answers for the ASGI fast path: the document built in one worker thread.

When the fast path has checked the token and the team's state from the cache but holds no
document for the ETag (a new version after an approval, a revoke, a grant; or the document cache
turned off), Django would answer by running its middleware and DRF around the same three
queries, hopping between the event loop and a thread made for the request a dozen times; for a
small catalogue that costs several times the queries. `catalogue_build_in_thread` does only
what the view does for that answer (`CatalogueView.get` -> `AgentView.conditional`): build the
document (`tools_document_body`, or `search_document` for a search: the functions the view
uses), keep it under its ETag when
the document cache is on, and record the token's use (`token_mark_used`, database write
allowed), in one thread of the event loop's executor, then hand the database connection back.
Whatever goes wrong (the role is gone, the database fails) is left to Django, which answers
exactly as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from registry.catalogue.documents import catalogue_document
from registry.catalogue.fragments import tools_document_body
from registry.catalogue.search import SearchRequest, search_document
from registry.catalogue.versions import CatalogueState
from registry.core.cache import cache_degraded
from registry.core.request_ids import request_id_bound
from registry.teams.tokens import AgentIdentity, token_mark_used


@dataclass(frozen=True)
class BuiltAnswer:
    body: bytes
    from_cache: bool
    degraded: bool


class BuildFailed(Exception):
    """Django should answer this request (it will fail or refuse it the way it always does)."""


def _build(
    *,
    identity: AgentIdentity,
    state: CatalogueState,
    fmt: str,
    category: str | None,
    etag: str,
    request_id: str,
    search: SearchRequest | None = None,
) -> BuiltAnswer:
    close_old_connections()  # what Django does when a request starts and ends
    try:
        with request_id_bound(request_id):
            with_preflight = fmt == "native" and bool(identity.declared_servers)
            if search is not None:  # the view's `_search`
                document = catalogue_document(
                    etag=etag,
                    build=lambda: search_document(
                        fmt=fmt,
                        team_id=identity.team_id,
                        role_id=identity.role_id,
                        category=category,
                        search=search,
                        version=state.version,
                    ),
                )
            else:
                document = catalogue_document(
                    etag=etag,
                    build=lambda: tools_document_body(
                        fmt=fmt,
                        team_id=identity.team_id,
                        role_id=identity.role_id,
                        version=state.version,
                        category=category,
                        declared_servers=identity.declared_servers if with_preflight else None,
                    ),
                )
            token_mark_used(identity, may_write_database=True)
            return BuiltAnswer(
                body=document.body, from_cache=document.from_cache, degraded=cache_degraded()
            )
    except Exception as exc:  # any failure: Django answers, as it always did
        raise BuildFailed from exc
    finally:
        close_old_connections()


async def catalogue_build_in_thread(
    *,
    identity: AgentIdentity,
    state: CatalogueState,
    fmt: str,
    category: str | None,
    etag: str,
    request_id: str,
    search: SearchRequest | None = None,
) -> BuiltAnswer:
    """The answer's document for `etag`, built (or found in the cache) in a worker thread."""
    built: BuiltAnswer = await sync_to_async(_build, thread_sensitive=False)(
        identity=identity,
        state=state,
        fmt=fmt,
        category=category,
        etag=etag,
        request_id=request_id,
        search=search,
    )
    return built
