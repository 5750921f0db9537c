"""One cache backend per process for the catalogue's hot path (token lookups, versions, documents).

Django keeps cache backends per async context: under ASGI every request would get a new Redis
client, hence a new connection. The catalogue's answers are mostly cache round trips, so they
share one backend per process (redis-py's client is thread-safe and pools its connections), made
again if the cache settings change (tests do).
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.cache import caches

_lock = threading.Lock()
_shared: tuple[str, Any] | None = None


def hot_cache() -> Any:
    """The process-wide backend for the `default` cache settings in force."""
    global _shared  # noqa: PLW0603 (one per process, on purpose)
    config = repr(sorted(settings.CACHES["default"].items()))
    current = _shared
    if current is None or current[0] != config:
        with _lock:
            current = _shared
            if current is None or current[0] != config:
                current = _shared = (config, caches.create_connection("default"))
    return current[1]
