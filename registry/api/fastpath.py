"""An ASGI fast path for the catalogue: 304s, cached documents, and documents built in one thread.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from django.db import close_old_connections, connection, transaction
from django.http.request import split_domain_port, validate_host
from redis import asyncio as aioredis

from registry.api.catalogue_query import CatalogueQuery, catalogue_headers, catalogue_query_plain
from registry.api.fastbuild import BuildFailed, catalogue_build_in_thread
from registry.catalogue.documents import catalogue_etag, document_key, etag_matches
from registry.catalogue.search import search_answer_keep, search_answer_kept
from registry.catalogue.versions import CatalogueState, state_key
from registry.core.cache import (
    CACHE_ERRORS,
    CatalogueCache,
    async_connection_options,
    cache_degraded,
    cache_trip,
    catalogue_cache,
    catalogue_cache_confirmed,
    hot_cache,
)
from registry.core.request_ids import request_id_for
from registry.teams.tokens import (
    AgentIdentity,
    TokenRejected,
    identity_from_entry,
    last_use_due,
    token_last_used_key,
    token_lookup_key,
    token_parse,
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

logger = logging.getLogger(__name__)

PATH = "/api/v1/catalogue"


class _NotHere(Exception):
    """This request is Django's to answer."""


def _unpickle(raw: bytes | str | None) -> Any:
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    try:
        return int(raw)  # Django's Redis serializer stores integers as they are
    except ValueError:
        return pickle.loads(raw)  # noqa: S301 (our own cache, written by Django)


def _confirm_epoch() -> None:
    """Confirm the cache epoch as Django's first cache read of a request would (in a thread).

    Requests wait for it, so it never waits long for a lock another transaction holds on the
    epoch row (PostgreSQL: `lock_timeout`); then Django answers, and confirms, as before."""
    close_old_connections()
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '2s'")
            catalogue_cache()
    except Exception:  # the database failed: Django answers (and fails) as it always did
        logger.debug("the fast path could not confirm the cache epoch", exc_info=True)
    finally:
        close_old_connections()


class CatalogueFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._client: tuple[str, aioredis.Redis] | None = None
        self._confirming: asyncio.Task[None] | None = None

    async def _confirmed_cache(self) -> CatalogueCache | None:
        """The cache under an epoch confirmed recently, confirming it now if that is due."""
        cache = catalogue_cache_confirmed()
        if cache is None and isinstance(hot_cache(), RedisCache) and not cache_degraded():
            loop = asyncio.get_running_loop()
            pending = self._confirming
            if pending is None or pending.done() or pending.get_loop() is not loop:
                pending = loop.create_task(sync_to_async(_confirm_epoch, thread_sensitive=False)())
                self._confirming = pending
            await asyncio.shield(pending)  # one confirmation, whoever waits for it
            cache = catalogue_cache_confirmed()
        return cache

    async def _redis(self) -> tuple[CatalogueCache, aioredis.Redis] | None:
        if not settings.TOOLROOM_CATALOGUE_FAST_PATH:
            return None
        cache = await self._confirmed_cache()
        if cache is None or not isinstance(cache.backend, RedisCache):
            return None
        location: str = cast(Any, cache.backend)._servers[0]
        if self._client is None or self._client[0] != location:
            self._client = (
                location,
                aioredis.Redis.from_url(location, **async_connection_options()),
            )
        return cache, self._client[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == PATH:
            try:
                await self._answer(scope, send)
            except _NotHere:
                pass
            except CACHE_ERRORS as exc:
                cache_trip(exc, where="fast path")
            else:
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, send: Send) -> None:
        redis = await self._redis()
        if redis is None:
            raise _NotHere
        cache, client = redis
        backend = cache.backend
        headers = {name.decode("latin-1").lower(): value for name, value in scope["headers"]}
        self._check_transport(scope, headers)
        query = catalogue_query_plain(scope.get("query_string", b""))
        if query is None:
            raise _NotHere
        search = query.search

        authorization = headers.get("authorization", b"").decode("latin-1").split()
        if len(authorization) != 2 or authorization[0].lower() != "bearer":
            raise _NotHere
        plain = authorization[1]
        prefix = token_parse(plain)
        if prefix is None:
            raise _NotHere
        entry = _unpickle(
            await client.get(backend.make_and_validate_key(token_lookup_key(prefix, cache=cache)))
        )
        if not isinstance(entry, dict):
            raise _NotHere
        now = time.time()
        try:
            identity = identity_from_entry(entry, plain, now)
        except TokenRejected as exc:
            raise _NotHere from exc

        raw_state = await client.get(
            backend.make_and_validate_key(state_key(identity.team_id, cache=cache))
        )
        if not raw_state:
            raise _NotHere
        state = CatalogueState.decode(raw_state)
        if state.pending or state.is_stale(now) or not cache.intact():
            raise _NotHere
        etag = catalogue_etag(identity=identity, state=state, variant=query.variant(identity))
        degraded = False  # read from the cache: only a build can find it degraded
        if etag_matches(headers.get("if-none-match", b"").decode("latin-1"), etag):
            status, body = 304, b""
            extra: list[tuple[bytes, bytes]] = []
        else:
            body = None
            if settings.TOOLROOM_CATALOGUE_CACHE_SECONDS > 0:
                if search is not None:  # kept in the process (registry.catalogue.search)
                    body = search_answer_kept(epoch=cache.epoch, etag=etag)
                if body is None:
                    body = _unpickle(
                        await client.get(backend.make_and_validate_key(document_key(etag)))
                    )
                    if not cache.intact():
                        raise _NotHere
                    if search is not None and isinstance(body, bytes):
                        search_answer_keep(epoch=cache.epoch, etag=etag, body=body)
            status, origin, extra = 200, b"hit", []
            if not isinstance(body, bytes):  # not cached: built in one thread, as Django would
                body, origin, extra, degraded = await self._build(
                    identity=identity, state=state, query=query, etag=etag, headers=headers
                )
                if search is not None and cache.intact():
                    search_answer_keep(epoch=cache.epoch, etag=etag, body=body)
            extra = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-toolroom-cache", origin),
                *extra,
            ]
        if last_use_due(identity.token_id, now):
            await client.set(
                backend.make_and_validate_key(token_last_used_key(identity.token_id)),
                pickle.dumps(now, pickle.HIGHEST_PROTOCOL),
            )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *extra,
                    *_encoded(catalogue_headers(etag=etag, degraded=degraded)),
                    *_encoded(security_headers(secure=self._secure(scope, headers))),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _build(
        self,
        *,
        identity: AgentIdentity,
        state: CatalogueState,
        query: CatalogueQuery,
        etag: str,
        headers: dict[str, bytes],
    ) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], bool]:
        """The document Django's view would build for this ETag (registry.api.fastbuild),
        and the headers its middleware would add to such an answer."""
        request_id = request_id_for(headers.get("x-request-id", b"").decode("latin-1"))
        try:
            built = await catalogue_build_in_thread(
                identity=identity, state=state, query=query, etag=etag, request_id=request_id
            )
        except BuildFailed as exc:
            raise _NotHere from exc
        extra = [(b"x-request-id", request_id.encode())]
        return built.body, b"hit" if built.from_cache else b"miss", extra, built.degraded

    def _check_transport(self, scope: Scope, headers: dict[str, bytes]) -> None:
        """What Django would refuse or redirect (a host not allowed, plain HTTP where HTTPS is
        required) is left to Django."""
        if settings.USE_X_FORWARDED_HOST or settings.DISALLOWED_USER_AGENTS:
            raise _NotHere
        host = headers.get("host", b"").decode("latin-1")
        domain, _ = split_domain_port(host)
        allowed = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed:
            allowed = [".localhost", "127.0.0.1", "[::1]"]
        if not domain or not validate_host(domain, allowed):
            raise _NotHere
        if settings.SECURE_SSL_REDIRECT and not self._secure(scope, headers):
            raise _NotHere

    def _secure(self, scope: Scope, headers: dict[str, bytes]) -> bool:
        """HTTPS as Django's `request.is_secure()` sees it (behind a proxy: its header)."""
        proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        if proxy_header:
            name, expected = proxy_header
            given = headers.get(name.removeprefix("HTTP_").replace("_", "-").lower())
            if given is not None:
                return bool(given.decode("latin-1").split(",")[0].strip() == expected)
        return bool(scope.get("scheme") == "https")


def security_headers(*, secure: bool) -> list[tuple[str, str]]:
    """The headers Django's security and clickjacking middleware add to every answer (the fast
    path answers without them; tests/catalogue/test_catalogue_fastpath_headers.py holds the two
    equal)."""
    headers = [("X-Content-Type-Options", "nosniff")]
    if secure and settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            hsts += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            hsts += "; preload"
        headers.append(("Strict-Transport-Security", hsts))
    if settings.SECURE_REFERRER_POLICY:
        headers.append(("Referrer-Policy", str(settings.SECURE_REFERRER_POLICY)))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    headers.append(("X-Frame-Options", settings.X_FRAME_OPTIONS))
    return headers


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def catalogue_fast_path(app: ASGIApp) -> ASGIApp:
    return CatalogueFastPath(app)
