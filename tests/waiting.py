"""Waiting in tests: poll a condition until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float = 30.0,
    what: str = "the condition",
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Return once `condition()` is true; AssertionError naming `what` (and the tail of `log`,
    a worker's log file, when given) if it is not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    message = f"timed out waiting for {what}"
    if log is not None:
        message += f"\n--- worker log ---\n{tail}"
    raise AssertionError(message)
