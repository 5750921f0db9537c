"""`X-Toolroom-Degraded`'s value when the cache's circuit and the database outage overlap."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from registry.core import cache as cache_module


@pytest.fixture
def process_cache() -> Iterator[cache_module._ProcessCache]:
    current = cache_module._current()
    saved = replace(current)
    yield current
    for field in ("outage", "epoch", "open_until"):
        setattr(current, field, getattr(saved, field))


def test_an_open_cache_circuit_alone_says_cache(process_cache):
    process_cache.outage = False
    process_cache.open_until = time.monotonic() + 5

    assert cache_module.degraded_marker() == "cache"


def test_a_database_outage_says_database_even_while_the_cache_circuit_is_open(process_cache):
    """A Redis read that times out under load opens the circuit mid-outage; the answer is still
    the last confirmed state, which is what the marker must say."""
    process_cache.outage = True
    process_cache.epoch = process_cache.epoch or 1
    process_cache.open_until = time.monotonic() + 5

    assert cache_module.degraded_marker() == "database"


def test_nothing_degraded_says_nothing(process_cache):
    process_cache.outage = False
    process_cache.open_until = 0.0

    assert cache_module.degraded_marker() is None
