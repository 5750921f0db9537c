"""The one helper for what a process keeps between requests (`VersionedCache`) and its one reset
(`forget_all`)."""

from __future__ import annotations

import threading
from typing import Any

from registry.catalogue import fragments, search
from registry.core.process_cache import VersionedCache, forget_all
from registry.gateway import checks, content, search_mode


def test_a_value_is_found_only_at_the_version_it_was_kept_at():
    cache: VersionedCache[str, str] = VersionedCache("test", limit=10)

    cache.put("team", "at 3", 3)

    assert cache.get("team", 3) == "at 3"
    assert cache.get("team", 4) is None
    assert cache.get("team") is None


def test_a_slow_build_of_an_older_version_never_replaces_a_newer_value():
    cache: VersionedCache[str, str] = VersionedCache("test", limit=10)
    cache.put("team", "at 5", 5)

    answered = cache.put("team", "at 4", 4)

    assert answered == "at 4"  # the caller gets what it built
    assert cache.get("team", 5) == "at 5"
    assert cache.get("team", 4) is None


def test_the_least_recently_used_value_goes_first():
    cache: VersionedCache[str, int] = VersionedCache("test", limit=2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")

    cache.put("c", 3)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_a_value_past_its_time_is_not_found():
    cache: VersionedCache[str, str] = VersionedCache("test", limit=10)

    cache.put("gone", "x", ttl=0)
    cache.put("kept", "y", ttl=3600)

    assert cache.get("gone") is None
    assert cache.get("kept") == "y"


def test_one_thread_builds_a_value_the_others_wait_for():
    cache: VersionedCache[str, int] = VersionedCache("test", limit=10)
    builds = []
    release = threading.Event()

    def build():
        builds.append(1)
        release.wait(timeout=10)
        return len(builds)

    answers = []
    threads = [
        threading.Thread(target=lambda: answers.append(cache.get_or_build("k", build, 1)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join(timeout=10)

    assert builds == [1]
    assert answers == [1] * 8


def test_forget_all_empties_every_cache_of_the_process():
    kept: list[VersionedCache[Any, Any]] = [
        checks._tables,
        checks._validators,
        content._contents,
        search._candidates,
        search._answers,
        search_mode._team_defaults,
        search_mode._lists,
        fragments.fragments._fragments,
    ]
    for cache in kept:
        cache.put(("any",), object(), 1)
    own: VersionedCache[str, str] = VersionedCache("test", limit=1)
    own.put("k", "v")

    forget_all()

    assert [len(cache) for cache in [*kept, own]] == [0] * (len(kept) + 1)


def test_get_many_finds_what_get_finds():
    cache: VersionedCache[str, str] = VersionedCache("test", limit=10)
    cache.put("old", "x", 1)
    cache.put("gone", "y", ttl=0)
    cache.put("kept", "z")

    assert cache.get_many(["old", "gone", "kept", "never"]) == [None, None, "z", None]
    assert cache.get_many(["old", "kept"], 1) == ["x", None]


def test_get_many_keeps_what_it_found_recently_used():
    cache: VersionedCache[str, int] = VersionedCache("test", limit=2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get_many(["a"])

    cache.put("c", 3)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
