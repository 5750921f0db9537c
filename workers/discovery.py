"""Discovering a server: open a session, list what it offers, hand the outcome to the registry."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import anyio
from django.conf import settings
from django.db import close_old_connections

from registry.servers.jobs.discovery import (
    NEEDS_ACCOUNT,
    NEEDS_PERSON_OAUTH,
    DiscoveryOutcome,
    discovery_claim,
    discovery_lease_renew,
    discovery_record,
)
from registry.servers.jobs.launch import LaunchPlan, server_launch_plan
from workers.adapters.mcp_client import McpFailure, elapsed_ms
from workers.adapters.negotiation import connect_negotiated
from workers.discovery_account import PERSON_OAUTH, oauth_challenge, plan_with_discovery_token
from workers.launch import discovery_deadlines, session_mode, target_for
from workers.listing import failed_outcome, list_everything
from workers.runtime import warm_holder

logger = logging.getLogger(__name__)


async def discover_plan(plan: LaunchPlan) -> DiscoveryOutcome:
    """Discover a server over a session of its own, opened and closed here."""
    timings: dict[str, float] = {}
    via = "ephemeral session"
    start = time.perf_counter()
    launched: dict[str, Any] = {}
    try:
        target = await target_for(plan)
        launched = dict(getattr(target, "launched", {}))
        async with connect_negotiated(
            target, deadlines=discovery_deadlines(plan), mode=session_mode(plan)
        ) as connection:
            timings["connect"] = elapsed_ms(start)
            outcome = await list_everything(connection, timings=timings, via=via)
    except McpFailure as failure:
        timings["total"] = elapsed_ms(start)
        return replace(failed_outcome(failure, timings=timings, via=via), launched=launched)
    timings["total"] = elapsed_ms(start)
    return replace(outcome, launched=launched)


def discover_server(plan: LaunchPlan) -> DiscoveryOutcome:
    """Discover over a session of its own, outside any event loop. A per-person server is
    discovered with the admin's account linked for it (its token refreshed once if the server
    refuses it); a failed HTTP discovery asks the server whether it wants OAuth, and says so
    (NEEDS_PERSON_OAUTH, with the resource metadata URL) instead of the bare failure."""
    plan, unusable = plan_with_discovery_token(plan)
    if unusable is not None:
        return DiscoveryOutcome(ok=False, error=unusable.message, error_kind=NEEDS_ACCOUNT)
    outcome = anyio.run(discover_plan, plan)
    if outcome.ok:
        return outcome
    challenge = anyio.run(oauth_challenge, plan)
    if challenge is None:
        return outcome
    if plan.upstream_auth == PERSON_OAUTH:  # the admin's token was refused: refresh, once
        plan, unusable = plan_with_discovery_token(plan, refused=plan.upstream_token)
        if unusable is not None:
            return replace(outcome, error=unusable.message, error_kind=NEEDS_ACCOUNT)
        return anyio.run(discover_plan, plan)
    if not challenge:
        return outcome  # a 401 that names no OAuth metadata: the shared credential's problem
    return replace(
        outcome,
        ok=False,
        error_kind=NEEDS_PERSON_OAUTH,
        resource_metadata=challenge,
        error=f"{plan.name or plan.slug} answered 401 without a usable credential and names "
        f"its OAuth protected resource metadata ({challenge[:300]}): it signs each person in "
        "with their own account.",
    )


@contextmanager
def discovery_lease_kept(run_id: int) -> Iterator[None]:
    """Renew the run's lease every third of it while the block runs (a thread: the discovery
    itself may block in the SDK). A failed renewal (database blip) is retried at the next one."""
    done = threading.Event()

    def renew() -> None:
        while not done.wait(settings.TOOLROOM_DISCOVERY_LEASE_SECONDS / 3):
            try:
                discovery_lease_renew(run_id=run_id)
            except Exception:
                logger.exception("lease of discovery run %s not renewed; retrying", run_id)
            finally:
                close_old_connections()

    thread = threading.Thread(target=renew, name=f"discovery-lease-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def run_discovery(run_id: int) -> None:
    """Claim a discovery run under a lease, discover, record. Runs in a worker; safe to run twice
    (a redelivered task restarts a run only once the lease of the worker that had it expired)."""
    run = discovery_claim(run_id=run_id)
    if run is None:
        return
    with discovery_lease_kept(run.pk):
        plan = server_launch_plan(server=run.server)
        manager = warm_holder(plan.server_id)
        outcome = discover_server(plan) if manager is None else manager.discover(plan.server_id)
    discovery_record(run=run, outcome=outcome)
