"""The shared circuit's half-open probe: one real call across every gateway process, once the open
time has passed, and its outcome.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import logging
import math
import uuid

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from registry.audit.services import audit_record
from registry.core.cache import CACHE_ERRORS, hot_cache
from registry.servers.models import CircuitState, Health, McpServer, ServerStatus
from registry.servers.signals import announce_visibility_change

logger = logging.getLogger(__name__)

_KEY = "toolroom:circuit-probe:{server_id}"
FAILED = "failed"
CLOSED = "closed"


def circuit_open_seconds() -> float:
    """How long the shared circuit stays open before a probe (and after a failed one)."""
    return float(settings.TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS)


def _seconds(value: float) -> int:
    return max(1, math.ceil(value))


def circuit_probe_claim(*, server_id: int, call_seconds: float) -> str | None:
    """Take the server's probe lease: the claim's token when this call is the probe, None when
    another call holds it (or a failed probe keeps the circuit open), or Redis does not answer.
    The lease lapses after the call's deadline plus one open time, so a prober that died blocks
    the next probe no longer than a failed probe would."""
    claim = uuid.uuid4().hex
    ttl = _seconds(call_seconds + circuit_open_seconds())
    try:
        taken = hot_cache().add(_KEY.format(server_id=server_id), claim, timeout=ttl)
    except CACHE_ERRORS as exc:
        logger.warning("no probe of server %s: the cache did not answer (%s)", server_id, exc)
        return None
    return claim if taken else None


def circuit_probe_failed(*, server_id: int) -> None:
    """The probe did not reach the server: no other probe for another open time."""
    try:
        hot_cache().set(
            _KEY.format(server_id=server_id), FAILED, timeout=_seconds(circuit_open_seconds())
        )
    except CACHE_ERRORS as exc:  # the lease lapses by itself
        logger.warning("could not record the failed probe of server %s: %s", server_id, exc)


def circuit_probe_passed(*, server_id: int, slug: str, error: str = "") -> bool:
    """The probe reached the server: close its circuit for every gateway process. The lease is
    kept (as `closed`) for one open time, so a call that still reads the open circuit from a
    table made before the close does not probe again. Returns whether this closed it."""
    closed = server_circuit_close(server_id=server_id, slug=slug)
    try:
        hot_cache().set(
            _KEY.format(server_id=server_id), CLOSED, timeout=_seconds(circuit_open_seconds())
        )
    except CACHE_ERRORS as exc:
        logger.warning("could not record the passed probe of server %s: %s", server_id, exc)
    return closed


def server_circuit_close(*, server_id: int, slug: str) -> bool:
    """A real call reached the server while its circuit was open: record it healthy and close
    the circuit, as a passing health check does (the next check still compares its tools), and
    announce it (the teams' catalogue versions move, so every call table is made again).

    Returns False when the circuit was not open (a health check closed it meanwhile)."""
    now = timezone.now()
    with transaction.atomic():
        status = ServerStatus.objects.select_for_update().filter(server_id=server_id).first()
        if status is None or status.circuit_state != CircuitState.OPEN:
            return False
        opened_at = status.circuit_opened_at
        status.circuit_state = CircuitState.CLOSED
        status.circuit_opened_at = None
        status.health = Health.HEALTHY
        status.consecutive_failures = 0
        status.last_healthy_at = now
        status.last_error = ""
        status.save(
            update_fields=[
                "circuit_state",
                "circuit_opened_at",
                "health",
                "consecutive_failures",
                "last_healthy_at",
                "last_error",
                "updated_at",
            ]
        )
        server = McpServer.objects.get(pk=server_id)
        open_for = f" after {(now - opened_at).total_seconds():.1f} s" if opened_at else ""
        audit_record(
            actor="gateway",
            action="server.circuit_closed",
            target=server,
            server=server,
            summary=f"A probe call reached {slug}: the gateway closed its circuit{open_for}.",
            before={"circuit_state": CircuitState.OPEN},
            after={"circuit_state": CircuitState.CLOSED},
        )
        announce_visibility_change(server_ids=[server_id], reason="server.circuit_closed")
    return True
