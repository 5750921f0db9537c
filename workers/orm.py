"""ORM code run from a worker's event loop (a runtime worker's warm sessions): in a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from django.db import close_old_connections, connection

T = TypeVar("T")


async def orm_in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ORM code off the event loop, in a thread, closing stale connections after."""

    def call() -> T:
        try:
            return fn(*args, **kwargs)
        except Exception:
            # A connection the server closed stays broken in this thread: drop it now.
            connection.close_if_unusable_or_obsolete()
            raise
        finally:
            close_old_connections()

    return await anyio.to_thread.run_sync(call)
