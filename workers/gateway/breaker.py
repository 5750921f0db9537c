"""A server's circuit breaker and concurrency gate in one gateway process."""

from __future__ import annotations

import asyncio

BREAKER_THRESHOLD = 5
BREAKER_COOLDOWN_SECONDS = 10.0


class Breaker:
    """A per-server circuit breaker in this process: opens after consecutive failures, lets one
    probe through after the cool-down (half-open), closes on a success. (The health checks'
    circuit, shared by every process, is in the call table: `CallTarget.circuit_open`.)"""

    def __init__(self, *, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.opened_at: float | None = None
        self.opened_version: int | None = None
        self.probing = False

    def admit(self, now: float, version: int | None) -> bool:
        """Whether a call may go; a catalogue version newer than the one the circuit opened at
        (the health check closed the shared circuit, for instance) allows the probe at once."""
        if self.opened_at is None:
            return True
        if self.probing:
            return False
        if now - self.opened_at < self.cooldown and version == self.opened_version:
            return False
        self.probing = True  # half-open: this call is the probe
        return True

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.probing = False

    def failure(self, now: float, version: int | None) -> bool:
        """Count a failure; True when this one opened the circuit."""
        self.failures += 1
        was_open = self.opened_at is not None
        self.probing = False
        if self.failures >= self.threshold or was_open:
            self.opened_at = now
            self.opened_version = version
            return not was_open
        return False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.probing else "open"


class ServerGate:
    """A server's concurrency limit with a bounded queue of waiting calls."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.semaphore = asyncio.Semaphore(limit)
        self.waiting = 0
