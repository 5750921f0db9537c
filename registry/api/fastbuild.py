"""Uncached catalogue answers for the ASGI fast path: the document built in one build thread.

More: docs/catalogue.md, "Module notes".
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

from registry.api.catalogue_query import CatalogueQuery, catalogue_query_document
from registry.catalogue.versions import CatalogueState
from registry.core.cache import cache_degraded
from registry.core.request_ids import request_id_bound
from registry.teams.callers import Caller, caller_mark_used


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
    identity: Caller,
    state: CatalogueState,
    query: CatalogueQuery,
    etag: str,
    request_id: str,
) -> BuiltAnswer:
    try:
        with request_id_bound(request_id):
            document = catalogue_query_document(
                identity=identity, state=state, query=query, etag=etag
            )
            caller_mark_used(identity, may_write_database=True)
            return BuiltAnswer(
                body=document.body, from_cache=document.from_cache, degraded=cache_degraded()
            )
    except Exception as exc:  # any failure: Django answers, as it always did
        raise BuildFailed from exc


async def catalogue_build_in_thread(
    *,
    identity: Caller,
    state: CatalogueState,
    query: CatalogueQuery,
    etag: str,
    request_id: str,
) -> BuiltAnswer:
    """The answer's document for `etag`, built (or found in the cache) on a build thread."""
    built: BuiltAnswer = await asyncio.wrap_future(
        _build_threads.submit(
            lambda: _build(
                identity=identity, state=state, query=query, etag=etag, request_id=request_id
            )
        )
    )
    return built
