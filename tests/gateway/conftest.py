"""Fixtures the gateway's tests share: a real gateway process (tests/gateway_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway_helpers import RunningGateway


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    """A gateway process of its own for the test, stopped after it (a module that needs another
    kind, such as test_gateway_runtime.py's, defines its own)."""
    running = RunningGateway()
    yield running
    running.stop()
