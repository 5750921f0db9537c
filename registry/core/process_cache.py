"""What a process keeps between requests (call tables, kept catalogues, parsed lists, secrets...),
each value valid at a version (a team's catalogue version, a cache epoch) and for a while: one
helper, `VersionedCache`, and one `forget_all()` that empties every one of them (tests, whose
rolled-back databases hand out the same ids and versions again).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Entry(NamedTuple, Generic[V]):
    version: int | None
    value: V
    expires: float | None  # time.monotonic(); None: while the version holds


_every: weakref.WeakSet[VersionedCache[Any, Any]] = weakref.WeakSet()
_every_lock = threading.Lock()


class VersionedCache(Generic[K, V]):
    """At most `limit` values by key, the least recently used dropped first. A value found is
    the one kept for that key at the version asked for (and not past its `ttl`); keeping a
    value never replaces one kept at a newer version (a slow build must not undo a newer one)."""

    def __init__(self, name: str, *, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[K, threading.Lock] = {}
        with _every_lock:
            _every.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, version: int | None = None) -> V | None:
        """The value kept for `key` at `version`, or None."""
        # No lock: each OrderedDict operation is one step under the GIL, and a key another
        # thread dropped meanwhile is simply not found (reads are the hot path: every call).
        entry = self._entries.get(key)
        if entry is None or entry.version != version:
            return None
        if entry.expires is not None and entry.expires <= time.monotonic():
            self._entries.pop(key, None)
            return None
        # Not contextlib.suppress: its three calls cost more than the move, on every call.
        try:  # noqa: SIM105
            self._entries.move_to_end(key)
        except KeyError:
            pass
        return entry.value

    def get_many(self, keys: Iterable[K], version: int | None = None) -> list[V | None]:
        """`get` of each key, in order, in one loop (a catalogue looks up one fragment per tool:
        1,000 method calls cost more than the lookups)."""
        entries = self._entries
        found: list[V | None] = []
        append = found.append
        now: float | None = None
        for key in keys:
            entry = entries.get(key)
            if entry is None or entry.version != version:
                append(None)
                continue
            if entry.expires is not None:
                now = time.monotonic() if now is None else now
                if entry.expires <= now:
                    entries.pop(key, None)
                    append(None)
                    continue
            try:  # noqa: SIM105
                entries.move_to_end(key)
            except KeyError:
                pass
            append(entry.value)
        return found

    def put(self, key: K, value: V, version: int | None = None, *, ttl: float | None = None) -> V:
        """Keep `value` for `key` at `version` (for at most `ttl` seconds); the value."""
        expires = time.monotonic() + ttl if ttl is not None else None
        with self._lock:
            current = self._entries.get(key)
            if (
                current is not None
                and version is not None
                and current.version is not None
                and current.version > version
            ):
                return value
            self._entries[key] = _Entry(version, value, expires)
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
        return value

    def get_or_build(self, key: K, build: Callable[[], V], version: int | None = None) -> V:
        """The value kept for `key` at `version`, else built by `build` and kept. One thread
        builds a key's value; the others that want it meanwhile wait for that one."""
        found = self.get(key, version)
        if found is not None:
            return found
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            found = self.get(key, version)
            if found is not None:
                return found
            try:
                return self.put(key, build(), version)
            finally:
                with self._lock:
                    self._building.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def forget_all() -> None:
    """Empty every `VersionedCache` of this process."""
    with _every_lock:
        caches = list(_every)
    for cache in caches:
        cache.clear()
