"""The shared circuit's half-open probe as the gateway's call path takes it: which call is the
probe (a lease in Redis, one call across all gateway processes), and what its outcome closes.

More: registry/gateway/circuit_probe.py, docs/gateway.md ("Circuit breaker")."""

from __future__ import annotations

import logging

from registry.gateway import port
from registry.gateway.port import CIRCUIT_OPEN, CallDecision, CallTarget
from workers.gateway.registry_calls import cached_or_in_thread, in_thread

logger = logging.getLogger(__name__)


async def probe_claim(decision: CallDecision) -> CallTarget | None:
    """The target of a call refused by the shared circuit (`circuit_open`) after its open time,
    when this call takes the probe's lease; None otherwise, and while Redis does not answer (the
    call stays refused, as before the probe existed)."""
    target = decision.probe_target
    if decision.code != CIRCUIT_OPEN or target is None:
        return None
    claim = await cached_or_in_thread(
        port.circuit_probe_claim,
        server_id=target.server_id,
        call_seconds=target.policy.call_deadline_seconds,
    )
    if claim is None:
        return None
    logger.info("probing the open circuit of %s with a real call", target.server_slug)
    return target


async def probe_outcome(target: CallTarget, *, reached: bool) -> None:
    """The probe reached the server (its circuit closes for every gateway process) or did not
    (open for another open time). Logged, never raised."""
    try:
        if reached:
            await in_thread(
                port.circuit_probe_passed, server_id=target.server_id, slug=target.server_slug
            )
        else:
            await cached_or_in_thread(port.circuit_probe_failed, server_id=target.server_id)
    except Exception:
        logger.exception("could not record the probe of %s", target.server_slug)
