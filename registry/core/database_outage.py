"""This process's view of the database during an outage: a circuit that makes what needs the
database fail at once, and how long the last confirmed state may still be served without it.

More: docs/operations.md, "Module notes".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

# What a database that is away raises through Django (psycopg's PoolTimeout is an
# OperationalError; a connection that broke mid-query can surface as InterfaceError).
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


def database_away(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached (no connection to be had, or it broke),
    as opposed to an error of one statement (a timeout, a lock, a constraint) or SQLite's."""
    import psycopg  # noqa: PLC0415 (not needed on SQLite)

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.OperationalError):
            return getattr(seen, "sqlstate", None) is None
        if isinstance(seen, psycopg.InterfaceError):
            return True
        seen = seen.__cause__
    return False


class DatabaseUnavailable(Exception):
    """What needs the database cannot be answered now (the database did not answer)."""

    code = "database_unavailable"

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(
            "Toolroom's database is not answering"
            + (f" ({detail})" if detail else "")
            + "; what needs it is refused until it is back. Retry shortly."
        )


@dataclass
class _Outage:
    lock: threading.Lock
    down_since: float | None = None  # monotonic; None while the database answers
    retry_at: float = 0.0  # monotonic; the circuit is open before it
    last_error: str = ""
    degraded_answers: int = 0


_outage = _Outage(lock=threading.Lock())


def continuity_seconds() -> float:
    """How close to the last confirmation the first failed one must start for the confirmed
    state to be served: twice the revalidation interval and a second (the epoch keeper
    confirms every interval; its attempt starts before any wait for the pool)."""
    return 2 * float(settings.TOOLROOM_CACHE_REVALIDATE_SECONDS) + 1.0


def database_trip(exc: BaseException) -> None:
    """A query failed because the database is away: open the circuit (logged once per outage)."""
    now = time.monotonic()
    with _outage.lock:
        first = _outage.down_since is None
        if first:
            _outage.down_since = now
        _outage.retry_at = now + float(settings.TOOLROOM_DATABASE_RETRY_SECONDS)
        _outage.last_error = f"{type(exc).__name__}: {exc}".strip()[:200]
    if first:
        logger.warning("the database is not answering: %s", _outage.last_error)


def database_answered() -> None:
    """A query succeeded: the outage (if any) is over."""
    if _outage.down_since is None:
        return
    with _outage.lock:
        was = _outage.down_since
        _outage.down_since = None
        _outage.retry_at = 0.0
    if was is not None:
        logger.warning("the database answers again after %.1f s", time.monotonic() - was)


def database_circuit_open() -> bool:
    """Whether what needs the database should fail at once (no query tried)."""
    return _outage.retry_at > time.monotonic()


def database_down() -> bool:
    """Whether the last query this process tried failed for want of a database."""
    return _outage.down_since is not None


def database_down_since() -> float | None:
    return _outage.down_since


def database_refusal() -> DatabaseUnavailable:
    return DatabaseUnavailable(_outage.last_error)


def degraded_answer_counted() -> None:
    """An answer served from the last confirmed state (for /healthz and the metric)."""
    with _outage.lock:
        _outage.degraded_answers += 1


def database_status() -> dict[str, object]:
    """What the gateway's /healthz says about the database, as this process sees it."""
    since = _outage.down_since
    return {
        "ok": since is None,
        "downForSeconds": None if since is None else round(time.monotonic() - since, 1),
        "lastError": _outage.last_error if since is not None else "",
        "degradedAnswers": _outage.degraded_answers,
    }


def forget_outage() -> None:
    """Back to no outage (tests)."""
    with _outage.lock:
        _outage.down_since = None
        _outage.retry_at = 0.0
        _outage.last_error = ""
        _outage.degraded_answers = 0


class DatabaseOutageMiddleware:
    """A request the database failed (or that needs it while it is away) is answered 503 with
    the JSON error body, not 500: `database_unavailable`, retry shortly."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_ERRORS) and database_away(exception):
            database_trip(exception)
            refusal = database_refusal()
        elif isinstance(exception, DatabaseUnavailable):
            refusal = exception
        else:
            return None
        from registry.core.api_errors import api_error_body  # noqa: PLC0415

        response = JsonResponse(api_error_body(DatabaseUnavailable.code, str(refusal)), status=503)
        response["Retry-After"] = "2"
        return response
