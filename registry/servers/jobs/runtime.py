"""Warm runtimes as the control plane sees them: who holds which server, and what is wanted.

A server marked auto-start (and approved) should be running as a warm runtime on exactly one
runtime worker. Workers claim a server with a conditional update and keep the claim alive with
heartbeats; a claim whose heartbeat is older than TOOLROOM_RUNTIME_STALE_SECONDS is dead and may
be taken over. Every write a worker makes about a runtime is fenced by its owner name, so a worker
that lost its claim cannot overwrite what the new owner reports. See docs/workers.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from registry.audit.services import Actor, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.core.secret_fields import secret_redact
from registry.servers.gateway_policy import runtime_wanted_q
from registry.servers.models import McpServer, ReviewStatus, RuntimeState, ServerStatus

RuntimeAction = Literal["start", "stop", "restart"]


def _stale_before(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.TOOLROOM_RUNTIME_STALE_SECONDS)


def runtime_live_owner(status: ServerStatus, *, now: datetime | None = None) -> str:
    """The worker holding the server's warm runtime, or '' when nobody holds it."""
    now = now or timezone.now()
    if (
        status.runtime_owner
        and status.runtime_heartbeat_at is not None
        and status.runtime_heartbeat_at >= _stale_before(now)
    ):
        return status.runtime_owner
    return ""


def runtime_request(*, server: McpServer, action: RuntimeAction, actor: Actor) -> None:
    """Start, stop or restart a server's warm runtime (from the admin or `mcp start|stop`)."""
    if action not in ("start", "stop", "restart"):
        raise ApplicationError(f"Unknown runtime action {action!r}.")
    with transaction.atomic():
        locked = McpServer.objects.select_for_update().get(pk=server.pk)
        status, _ = ServerStatus.objects.select_for_update().get_or_create(server=locked)
        if action in ("start", "restart") and locked.review_status != ReviewStatus.APPROVED:
            raise ApplicationError(
                f"{locked.name} is {locked.get_review_status_display().lower()}; only approved "
                "servers run as warm runtimes."
            )
        owner = runtime_live_owner(status)
        if action in ("start", "restart"):
            McpServer.objects.filter(pk=locked.pk).update(auto_start=True)
            ServerStatus.objects.filter(pk=status.pk).update(runtime_restarts=0, runtime_error="")
            if status.runtime_state == RuntimeState.FAILED:
                ServerStatus.objects.filter(pk=status.pk).update(runtime_state=RuntimeState.STOPPED)
        else:
            McpServer.objects.filter(pk=locked.pk).update(auto_start=False)
        if owner:
            task_queue.enqueue(task_queue.RUNTIME_COMMAND, args=[locked.pk, action], worker=owner)
        elif action != "stop":
            task_queue.enqueue(
                task_queue.RUNTIME_COMMAND,
                args=[locked.pk, "start"],
                queue=task_queue.RUNTIME_QUEUE,
            )
        audit_record(
            actor=actor,
            action=f"server.runtime_{action}_requested",
            target=locked,
            server=locked,
            summary=f"Asked the workers to {action} {locked.name}"
            + (f" (held by {owner})." if owner else "."),
        )


def runtime_restart_if_held(*, server: McpServer) -> bool:
    """Ask the worker holding the server warm (if any) for a new session, after commit."""
    status = ServerStatus.objects.filter(server=server).first()
    owner = runtime_live_owner(status) if status is not None else ""
    if owner:
        task_queue.enqueue(task_queue.RUNTIME_COMMAND, args=[server.pk, "restart"], worker=owner)
    return bool(owner)


def runtime_display_state(status: ServerStatus | None, *, now: datetime | None = None) -> str:
    """The runtime state as operators should read it: "owner lost" for a runtime said to be
    running or starting whose worker stopped renewing its claim TOOLROOM_RUNTIME_OWNER_LOST_SECONDS
    ago (a dead worker cannot say so itself)."""
    if status is None:
        return RuntimeState.STOPPED
    now = now or timezone.now()
    lost_before = now - timedelta(seconds=settings.TOOLROOM_RUNTIME_OWNER_LOST_SECONDS)
    if (
        status.runtime_state in (RuntimeState.RUNNING, RuntimeState.STARTING)
        and status.runtime_owner
        and (status.runtime_heartbeat_at is None or status.runtime_heartbeat_at < lost_before)
    ):
        return "owner lost"
    return str(status.runtime_state)


def runtime_claim(*, server_id: int, owner: str) -> bool:
    """Take the server's runtime if nobody live holds it (or we already do); a takeover from
    another worker (whose claim went stale) is audited."""
    now = timezone.now()
    previous = (
        ServerStatus.objects.filter(server_id=server_id)
        .values_list("runtime_owner", flat=True)
        .first()
    )
    claimed = (
        ServerStatus.objects.filter(server_id=server_id)
        .filter(
            Q(runtime_owner="")
            | Q(runtime_owner=owner)
            | Q(runtime_heartbeat_at__isnull=True)
            | Q(runtime_heartbeat_at__lt=_stale_before(now))
        )
        .update(
            runtime_owner=owner,
            runtime_heartbeat_at=now,
            runtime_state=RuntimeState.STARTING,
        )
    )
    if claimed == 1 and previous and previous != owner:
        server = McpServer.objects.get(pk=server_id)
        audit_record(
            actor=f"worker:{owner}",
            action="server.runtime_taken_over",
            target=server,
            server=server,
            summary=f"{owner} took over the warm runtime of {server.name} from {previous}, whose "
            "claim had gone stale.",
            details={"from": previous, "to": owner},
        )
    return claimed == 1


def runtime_report(
    *,
    server_id: int,
    owner: str,
    state: RuntimeState,
    error: str = "",
    stderr_tail: str | None = None,
    restarts: int | None = None,
) -> bool:
    """Record what a runtime is doing; ignored (False) unless `owner` still holds it."""
    now = timezone.now()
    server = McpServer.objects.filter(pk=server_id).first()
    if server is not None:
        secrets = server.secret_values()
        error = secret_redact(error, secrets)
        stderr_tail = None if stderr_tail is None else secret_redact(stderr_tail, secrets)
    fields: dict[str, object] = {
        "runtime_state": state,
        "runtime_error": error[:5000],
        "runtime_heartbeat_at": now,
    }
    if state == RuntimeState.RUNNING:
        fields["runtime_started_at"] = now
    if stderr_tail is not None:
        fields["stderr_tail"] = stderr_tail[-20000:]
    if restarts is not None:
        fields["runtime_restarts"] = restarts
    if state in (RuntimeState.STOPPED, RuntimeState.FAILED):
        fields["runtime_owner"] = ""
    updated = ServerStatus.objects.filter(server_id=server_id, runtime_owner=owner).update(**fields)
    if updated and state == RuntimeState.STARTING and error and server is not None:
        # The session died and the worker restarts it (restarts counts this one).
        audit_record(
            actor=f"worker:{owner}",
            action="server.runtime_crashed",
            target=server,
            server=server,
            summary=f"{server.name} crashed and is being restarted"
            + (f" (restart {restarts})" if restarts else "")
            + ": "
            + error.splitlines()[0][:300],
            details={"restarts": restarts},
        )
    if updated and state == RuntimeState.FAILED and server is not None:
        audit_record(
            actor=f"worker:{owner}",
            action="server.runtime_failed",
            target=server,
            server=server,
            summary=f"{server.name} stopped restarting: "
            + (error.splitlines()[0][:300] if error else "no error was given."),
        )
    return updated == 1


def runtime_heartbeat(*, owner: str, server_ids: list[int]) -> list[int]:
    """Renew `owner`'s claims; returns the servers it no longer holds (taken over or released)."""
    if not server_ids:
        return []
    ServerStatus.objects.filter(server_id__in=server_ids, runtime_owner=owner).update(
        runtime_heartbeat_at=timezone.now()
    )
    held = set(
        ServerStatus.objects.filter(server_id__in=server_ids, runtime_owner=owner).values_list(
            "server_id", flat=True
        )
    )
    return [pk for pk in server_ids if pk not in held]


def server_sandbox_image_record(*, server_id: int, reference: str, digest: str) -> None:
    """Record the image (and its digest) a sandboxed server last ran from; audit a change."""
    status = ServerStatus.objects.filter(server_id=server_id).first()
    if status is None or (status.sandbox_image, status.sandbox_image_digest) == (reference, digest):
        return
    ServerStatus.objects.filter(server_id=server_id).update(
        sandbox_image=reference[:500], sandbox_image_digest=digest[:100]
    )
    server = McpServer.objects.get(pk=server_id)
    audit_record(
        actor="worker:sandbox",
        action="server.sandbox_image_changed",
        target=server,
        server=server,
        summary=f"{server.name} now runs from {reference} ({digest[:19]}).",
        before={"image": status.sandbox_image, "digest": status.sandbox_image_digest},
        after={"image": reference, "digest": digest},
    )


def runtime_forget_owner(*, owner: str) -> int:
    """A runtime worker starting under `owner` holds nothing yet: drop its old claims."""
    return ServerStatus.objects.filter(runtime_owner=owner).update(
        runtime_owner="", runtime_state=RuntimeState.STOPPED
    )


@dataclass(frozen=True)
class RuntimePlan:
    start: list[int]
    stop: list[tuple[int, str]]  # (server id, owner)


def runtime_reconcile_plan(*, now: datetime | None = None) -> RuntimePlan:
    """Which warm runtimes should be started (nobody live holds them) or stopped."""
    now = now or timezone.now()
    live = Q(status__runtime_heartbeat_at__gte=_stale_before(now)) & ~Q(status__runtime_owner="")
    # Auto-start servers, and those the gateway keeps warm (always, or on demand while in use).
    wanted = runtime_wanted_q()
    start = list(
        McpServer.objects.filter(wanted)
        .exclude(status__runtime_state=RuntimeState.FAILED)
        .exclude(live)
        .values_list("pk", flat=True)
    )
    stop = list(
        McpServer.objects.exclude(wanted).filter(live).values_list("pk", "status__runtime_owner")
    )
    return RuntimePlan(start=start, stop=[(pk, owner) for pk, owner in stop])
