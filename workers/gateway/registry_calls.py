"""How the gateway's event loop runs the registry's functions (registry.gateway.port): in the loop
while they need only the cache, in a thread when they need the database. While the database is
away (its circuit open) what needs it is refused at once with `DatabaseUnavailable`, and a query
that fails for want of a database opens the circuit and is refused the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from django.core.exceptions import SynchronousOnlyOperation
from django.db import close_old_connections

from registry.gateway.port import (
    DATABASE_ERRORS,
    DatabaseUnavailable,
    database_away,
    database_circuit_open,
    database_refusal,
    database_trip,
)

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run registry code (ORM, cache) off the event loop; drop stale connections after."""
    if database_circuit_open():
        raise database_refusal()

    def call() -> T:
        try:
            return fn(**kwargs)
        except DATABASE_ERRORS as exc:
            if not database_away(exc):
                raise
            database_trip(exc)
            raise DatabaseUnavailable(f"{type(exc).__name__}: {exc}".strip()[:200]) from exc
        finally:
            close_old_connections()

    return await anyio.to_thread.run_sync(call)


async def cached_or_in_thread(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run registry code that usually needs only the cache right here in the event loop; when it
    needs the database, Django refuses the first query (SynchronousOnlyOperation, raised before
    anything is sent) and the whole call is run again in a thread. The warm path thus costs no
    thread hop."""
    try:
        return fn(**kwargs)
    except SynchronousOnlyOperation:
        return await in_thread(fn, **kwargs)
