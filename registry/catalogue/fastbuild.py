"""Uncached catalogue answers for the ASGI fast path: the document built in one build thread.

When the fast path has checked the token and the team's state from the cache but holds no
document for the ETag (a new version after an approval, a revoke, a grant; or the document cache
turned off), Django would answer by running its middleware and DRF around the same three
queries, hopping between the event loop and a thread made for the request a dozen times; for a
small catalogue that costs several times the queries. `catalogue_build_in_thread` does only
what the view does for that answer (`CatalogueView.get` -> `AgentView.conditional`): build the
document (`tools_document_body`, or `search_document` for a search: the functions the view
uses), keep it under its ETag when the document cache is on, and record the token's use
(`token_mark_used`, database write allowed), in one build thread.
Whatever goes wrong (the role is gone, the database fails) is left to Django, which answers
exactly as it always did.

The builds run on a few threads of their own (`BUILD_THREADS`), each keeping its database
connection from one build to the next while builds keep coming: opening one for each build
cost more than the search it served (a new SQLite connection runs its PRAGMAs and reads the
schema again; a pooled PostgreSQL one is checked with a round trip on every checkout). A
thread gives its connection back (closes it, or returns it to the pool) after
`BUILD_IDLE_SECONDS` without a build, after a build during which a database error occurred or
that left autocommit changed, and once it has held it `BUILD_CONNECTION_MAX_SECONDS`. A kept
connection is not health-checked before each build: one that died meanwhile fails its build,
and Django answers that request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections

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


logger = logging.getLogger(__name__)

# At most this many builds at once per process, so at most this many database connections held
# by them (PostgreSQL's pool hands out DATABASE_POOL_MAX_SIZE, 10 by default, per process).
# Two, not four: a process runs Python on one core at a time (the GIL), so threads past the
# second only overlap more database waits while taking the GIL from each other and from the
# event loop; under 16 agents, 1 and 2 threads answered more uncached searches than 4 with a
# shorter tail on both databases (docs/search.md, "The uncached request path"). Two keep one
# slow build (a new version's catalogue, a query waiting on a lock) from holding up the rest.
BUILD_THREADS = 2
# A build thread closes its connection (or hands it back to the pool) after this long without a
# build, and after holding it this long (as CONN_MAX_AGE would).
BUILD_IDLE_SECONDS = 2.0
BUILD_CONNECTION_MAX_SECONDS = 60.0

_Job = tuple[contextvars.Context, Callable[[], Any], "concurrent.futures.Future[Any]"]


class _KeptConnections:
    """The database connections of one build thread, and when each was first seen open."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def held(self) -> bool:
        return any(c.connection is not None for c in connections.all(initialized_only=True))

    def after_build(self) -> None:
        now = time.monotonic()
        for conn in connections.all(initialized_only=True):
            if conn.connection is None:
                self._since.pop(conn.alias, None)
                continue
            since = self._since.setdefault(conn.alias, now)
            if (
                conn.errors_occurred
                or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]
                or now - since >= BUILD_CONNECTION_MAX_SECONDS
            ):
                self._close(conn)

    def release(self) -> None:
        for conn in connections.all(initialized_only=True):
            self._close(conn)

    def _close(self, conn: Any) -> None:
        self._since.pop(conn.alias, None)
        try:
            conn.close()  # drops the connection even when closing it fails
        except Exception:
            logger.debug("closing a build thread's connection failed", exc_info=True)


class BuildThreads:
    """Daemon threads (started on first use in each process) taking builds from one queue."""

    def __init__(self, count: int = BUILD_THREADS) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._pid = 0
        self._work: queue.SimpleQueue[_Job | threading.Barrier] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `job` on a build thread in a copy of the caller's context (as `sync_to_async`
        does)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._started().put((contextvars.copy_context(), job, future))
        return future

    def _started(self) -> queue.SimpleQueue[_Job | threading.Barrier]:
        if self._pid != os.getpid() or len(self._threads) < self._count:
            with self._lock:
                if self._pid != os.getpid():  # a forked child: its parent's threads are not here
                    self._pid, self._work, self._threads = os.getpid(), queue.SimpleQueue(), []
                while len(self._threads) < self._count:
                    thread = threading.Thread(
                        target=self._serve,
                        args=(self._work,),
                        name=f"catalogue-build-{len(self._threads)}",
                        daemon=True,
                    )
                    thread.start()
                    self._threads.append(thread)
        return self._work

    def _serve(self, work: queue.SimpleQueue[_Job | threading.Barrier]) -> None:
        kept = _KeptConnections()
        while True:
            try:
                item = work.get(timeout=BUILD_IDLE_SECONDS if kept.held() else None)
            except queue.Empty:
                kept.release()
                continue
            if isinstance(item, threading.Barrier):
                kept.release()
                with contextlib.suppress(threading.BrokenBarrierError):
                    item.wait()
                continue
            context, job, future = item
            if future.set_running_or_notify_cancel():
                try:
                    result = context.run(job)
                except BaseException as exc:  # handed to the request waiting for it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            try:
                kept.after_build()
            except Exception:  # asking a broken connection for its autocommit may fail
                kept.release()

    def release(self, timeout: float = 30.0) -> None:
        """Every build thread closes its connections (once it is done with the build in hand);
        for tests, before the test database goes."""
        with self._lock:
            count = len(self._threads) if self._pid == os.getpid() else 0
            if not count:
                return
            barrier = threading.Barrier(count + 1, timeout=timeout)
            for _ in range(count):  # a thread waits at the barrier: each takes exactly one
                self._work.put(barrier)
        barrier.wait()


_build_threads = BuildThreads()


def catalogue_build_connections_release() -> None:
    """Close the database connections the build threads keep (tests, before the test database
    is dropped or flushed under them)."""
    _build_threads.release()


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
    """The answer's document for `etag`, built (or found in the cache) on a build thread."""
    built: BuiltAnswer = await asyncio.wrap_future(
        _build_threads.submit(
            lambda: _build(
                identity=identity,
                state=state,
                fmt=fmt,
                category=category,
                etag=etag,
                request_id=request_id,
                search=search,
            )
        )
    )
    return built
