"""A sandboxed session's storage, as the workers handle it (docs/sandbox.md, "Storage").

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from registry.servers.jobs.launch import LaunchPlan
from registry.servers.models import StorageSeed, StorageVolume
from registry.servers.services.storage import (
    storage_volume_record,
    storage_volume_removed,
    storage_volume_usage_record,
)
from registry.servers.storage import StorageScope, storage_owner_key, storage_volume_name
from registry.teams.models import Team
from workers.adapters.sandbox import SandboxError, connect_engine
from workers.adapters.sandbox.spec import StorageMount
from workers.adapters.sandbox.volumes import (
    LABEL_STORAGE_OWNER,
    LABEL_STORAGE_PATH,
    LABEL_STORAGE_SERVER,
    LABEL_STORAGE_SIZE,
    storage_volume_names,
    volume_create,
    volume_exists,
    volume_remove,
    volume_usage,
)

logger = logging.getLogger(__name__)

CONVERSATION_ENDED = "its conversation's session ended"


def _installation() -> str:
    """This Toolroom's installation label (as workers.sandboxing labels everything): volumes of
    another installation sharing the engine are never listed, measured or removed here."""
    return str(settings.TOOLROOM_INSTALLATION)


@dataclass(frozen=True)
class UsedVolume:
    name: str
    scope: str


def _owner_label(owner_key: str) -> str:
    kind, _, rest = owner_key.partition(":")
    if kind == "team":
        slug = Team.objects.filter(pk=int(rest)).values_list("slug", flat=True).first()
        return f"team {slug or rest}"
    if kind == "conversation":
        return f"conversation {rest[:8]}"
    return "the server"


def storage_mounts(
    plan: LaunchPlan, *, isolation_key: str, image: str
) -> tuple[list[StorageMount], list[UsedVolume]]:
    """The storage of one session (blocking: it may make volumes). Raises SandboxError."""
    if not plan.storage:
        return [], []
    mounts: list[StorageMount] = []
    used: list[UsedVolume] = []
    engine = connect_engine()
    try:
        for entry in plan.storage:
            owner = storage_owner_key(entry.scope, isolation_key)
            if owner is None:
                mounts.append(StorageMount(target=entry.path, size_mb=entry.size_mb))
                continue
            name = storage_volume_name(server_slug=plan.slug, path=entry.path, owner_key=owner)
            volume = storage_volume_record(
                server_id=plan.server_id,
                name=name,
                path=entry.path,
                scope=entry.scope,
                owner_key=owner,
                owner_label=_owner_label(owner),
                size_limit_mb=entry.size_mb,
            )
            if volume.delete_requested_at is not None and volume_remove(engine, name):
                # An admin deleted it and no session holds it: this session starts afresh.
                storage_volume_removed(name=name, reason="deleted by an admin")
                volume = storage_volume_record(
                    server_id=plan.server_id,
                    name=name,
                    path=entry.path,
                    scope=entry.scope,
                    owner_key=owner,
                    owner_label=_owner_label(owner),
                    size_limit_mb=entry.size_mb,
                )
            if not volume_exists(engine, name):
                seed = None
                if entry.path in plan.seeded_paths:
                    seed = (
                        StorageSeed.objects.filter(server_id=plan.server_id, path=entry.path)
                        .values_list("archive", flat=True)
                        .first()
                    )
                volume_create(
                    engine,
                    name=name,
                    image=image,
                    target=entry.path,
                    installation=_installation(),
                    labels={
                        LABEL_STORAGE_SERVER: plan.slug,
                        LABEL_STORAGE_PATH: entry.path,
                        LABEL_STORAGE_OWNER: owner,
                        LABEL_STORAGE_SIZE: str(entry.size_mb),
                    },
                    seed=bytes(seed) if seed is not None else None,
                )
            mounts.append(
                StorageMount(
                    target=entry.path,
                    size_mb=entry.size_mb,
                    volume=name,
                    read_only=volume.over_limit,
                )
            )
            used.append(UsedVolume(name=name, scope=entry.scope))
    finally:
        engine.close()
        close_old_connections()
    return mounts, used


def storage_after_session(used: list[UsedVolume]) -> None:
    """Measure the session's volumes; remove a conversation's (blocking; never raises)."""
    if not used:
        return
    try:
        engine = connect_engine()
    except SandboxError as exc:
        logger.warning("Storage after a session: %s", exc.message)
        return
    try:
        usage = volume_usage(engine, installation=_installation())
        for volume in used:
            conversation = volume.scope == StorageScope.CONVERSATION
            if conversation and volume_remove(engine, volume.name):
                storage_volume_removed(name=volume.name, reason=CONVERSATION_ENDED)
                continue
            storage_volume_usage_record(name=volume.name, used_bytes=usage.get(volume.name, 0))
    except SandboxError as exc:
        logger.warning("Storage after a session: %s", exc.message)
    finally:
        engine.close()
        close_old_connections()


def storage_volumes_sweep() -> dict[str, int]:
    """Remove what admins deleted, volumes whose server (or row) is gone, and conversations'
    volumes idle past the gateway's idle time; measure every volume. Raises SandboxError."""
    engine = connect_engine()
    removed = measured = 0
    try:
        on_engine = set(storage_volume_names(engine, installation=_installation()))
        rows = {row.name: row for row in StorageVolume.objects.all()}
        idle_since = timezone.now() - timedelta(
            seconds=2 * float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS)
        )
        for name in sorted(on_engine):
            row = rows.get(name)
            if row is None:
                reason = "no server has it any more"
            elif row.delete_requested_at is not None:
                reason = "deleted by an admin"
            elif row.scope == StorageScope.CONVERSATION and row.last_used_at < idle_since:
                reason = CONVERSATION_ENDED
            else:
                continue
            if volume_remove(engine, name):
                removed += 1
                on_engine.discard(name)
                if row is not None:
                    storage_volume_removed(name=name, reason=reason)
        for name, size in volume_usage(engine, installation=_installation()).items():
            if name in on_engine and storage_volume_usage_record(name=name, used_bytes=size):
                measured += 1
    finally:
        engine.close()
    return {"removed": removed, "measured": measured}
