"""Sandboxed servers' storage: the volumes the workers made (recorded, measured), their deletion
(audited, then done by a worker), and the archives that pre-fill new volumes."""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import tarfile
import zipfile
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, StorageSeed, StorageVolume
from registry.servers.storage import check_storage

MIB = 1024 * 1024
# An uploaded archive: at most this big as uploaded, and at most this many members.
SEED_MAX_UPLOAD_BYTES = 16 * MIB
SEED_MAX_MEMBERS = 10_000
# The sandbox's user, which owns everything in a volume.
VOLUME_UID = 65534


def storage_volume_record(
    *,
    server_id: int,
    name: str,
    path: str,
    scope: str,
    owner_key: str,
    owner_label: str,
    size_limit_mb: int,
) -> StorageVolume:
    """A volume a session is about to use: recorded when new, its last use moved forward."""
    volume, created = StorageVolume.objects.get_or_create(
        name=name,
        defaults={
            "server_id": server_id,
            "path": path,
            "scope": scope,
            "owner_key": owner_key,
            "owner_label": owner_label,
            "size_limit_mb": size_limit_mb,
        },
    )
    if not created:
        # A limit an admin raised (or lowered) applies to what was last measured at once.
        over = volume.used_bytes is not None and volume.used_bytes > size_limit_mb * MIB
        StorageVolume.objects.filter(pk=volume.pk).update(
            last_used_at=timezone.now(), size_limit_mb=size_limit_mb, over_limit=over
        )
        volume.refresh_from_db()
    return volume


def storage_volume_usage_record(*, name: str, used_bytes: int) -> StorageVolume | None:
    """What the engine measured a volume holds; over its limit, it is mounted read-only from the
    next session on (docs/sandbox.md)."""
    volume = StorageVolume.objects.filter(name=name).first()
    if volume is None:
        return None
    volume.used_bytes = used_bytes
    volume.measured_at = timezone.now()
    volume.over_limit = used_bytes > volume.size_limit_mb * MIB
    volume.save(update_fields=["used_bytes", "measured_at", "over_limit"])
    return volume


@transaction.atomic
def storage_volume_delete(*, actor: Actor, volume: StorageVolume, reason: str) -> StorageVolume:
    """An admin deletes a volume (its data is gone for good): audited now, removed from the
    engine by a worker once no container uses it."""
    locked = StorageVolume.objects.select_for_update().select_related("server").get(pk=volume.pk)
    reason = reason.strip()
    if not reason:
        raise ApplicationError("Give a reason for deleting the volume.", field="reason")
    if locked.delete_requested_at is None:
        locked.delete_requested_at = timezone.now()
        locked.save(update_fields=["delete_requested_at"])
        audit_record(
            actor=actor,
            action="storage.volume_deleted",
            target=locked.server,
            server=locked.server,
            summary=f"Deleted the storage volume {locked} of {locked.server.name}: {reason}",
            details={
                "volume": locked.name,
                "path": locked.path,
                "owner": locked.owner_key,
                "used_bytes": locked.used_bytes,
                "reason": reason,
            },
        )
    transaction.on_commit(
        lambda: task_queue.send_now(task_queue.STORAGE_VOLUMES_SWEEP, expires=3600), robust=True
    )
    return locked


def storage_volume_removed(*, name: str, reason: str) -> None:
    """A worker removed a volume from the engine: the row goes. A removal nobody asked for (a
    conversation ended) is audited here; an admin's deletion was audited when asked for."""
    volume = StorageVolume.objects.select_related("server").filter(name=name).first()
    if volume is None:
        return
    if volume.delete_requested_at is None:
        audit_record(
            actor="system",
            action="storage.volume_removed",
            target=volume.server,
            server=volume.server,
            summary=f"Removed the storage volume {volume} of {volume.server.name}: {reason}",
            details={"volume": volume.name, "path": volume.path, "reason": reason},
        )
    volume.delete()


@dataclass(frozen=True)
class NormalisedArchive:
    data: bytes  # gzip-compressed tar
    files: int
    size_bytes: int


def _safe_name(name: str) -> str | None:
    """A member's path relative to the volume, or None when it would leave it."""
    clean = posixpath.normpath(name.replace("\\", "/").lstrip("/"))
    if clean in (".", "") or clean.startswith("../") or clean == "..":
        return None
    return clean


def normalise_archive(*, filename: str, content: bytes, limit_bytes: int) -> NormalisedArchive:
    """A .tar, .tar.gz/.tgz or .zip as a tar of plain files and folders owned by the sandbox's
    user, names relative to the volume. Refuses links, devices, names leaving the volume, and
    more than `limit_bytes` unpacked (the volume's size)."""
    if len(content) > SEED_MAX_UPLOAD_BYTES:
        raise ApplicationError(
            f"The archive is {len(content) / MIB:.1f} MB; at most {SEED_MAX_UPLOAD_BYTES // MIB} "
            "MB may be uploaded.",
            field="archive",
        )
    members: list[tuple[str, bytes | None, int]] = []  # name, data (None: a folder), mode
    try:
        if filename.lower().endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(content)) as archive:
                for info in archive.infolist()[: SEED_MAX_MEMBERS + 1]:
                    mode = (info.external_attr >> 16) & 0o777
                    if info.is_dir():
                        members.append((info.filename, None, 0o700))
                    elif (info.external_attr >> 16) & 0o170000 in (0, 0o100000):
                        members.append((info.filename, archive.read(info), mode))
                    else:
                        raise ApplicationError(
                            f"{info.filename} is a link or special file; the archive may hold "
                            "plain files and folders only.",
                            field="archive",
                        )
        else:
            with tarfile.open(fileobj=io.BytesIO(content), mode="r:*") as archive:
                for member in archive.getmembers()[: SEED_MAX_MEMBERS + 1]:
                    if member.isdir():
                        members.append((member.name, None, 0o700))
                    elif member.isfile():
                        handle = archive.extractfile(member)
                        body = handle.read() if handle is not None else b""
                        members.append((member.name, body, member.mode))
                    else:
                        raise ApplicationError(
                            f"{member.name} is a link or special file; the archive may hold "
                            "plain files and folders only.",
                            field="archive",
                        )
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise ApplicationError(
            f"{filename} is not a readable .tar, .tar.gz, .tgz or .zip archive ({exc}).",
            field="archive",
        ) from exc
    if len(members) > SEED_MAX_MEMBERS:
        raise ApplicationError(
            f"The archive holds more than {SEED_MAX_MEMBERS} entries.", field="archive"
        )
    total = sum(len(data) for _, data, _ in members if data is not None)
    if total > limit_bytes:
        raise ApplicationError(
            f"The archive unpacks to {total / MIB:.1f} MB, more than the storage's "
            f"{limit_bytes // MIB} MB.",
            field="archive",
        )
    out = io.BytesIO()
    files = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for raw_name, data, mode in members:
            name = _safe_name(raw_name)
            if name is None:
                raise ApplicationError(
                    f"{raw_name!r} would be written outside the volume.", field="archive"
                )
            entry = tarfile.TarInfo(name)
            entry.uid = entry.gid = VOLUME_UID
            entry.mtime = 0
            if data is None:
                entry.type = tarfile.DIRTYPE
                entry.mode = 0o700
                tar.addfile(entry)
            else:
                entry.size = len(data)
                entry.mode = 0o700 if mode & 0o100 else 0o600
                tar.addfile(entry, io.BytesIO(data))
                files += 1
    return NormalisedArchive(
        data=gzip.compress(out.getvalue(), mtime=0), files=files, size_bytes=total
    )


@transaction.atomic
def storage_seed_set(
    *, actor: Actor, server: McpServer, path: str, filename: str, content: bytes
) -> StorageSeed:
    """Pre-fill every new volume of the storage at `path` with this archive (audited). Volumes
    that exist keep what they hold; delete one to have it made again from the archive."""
    entries = {entry.path: entry for entry in check_storage(server.storage)}
    entry = entries.get(path)
    if entry is None:
        known = ", ".join(sorted(entries)) or "none"
        raise ApplicationError(
            f"{server.name} has no storage at {path} (its storage paths: {known}).", field="path"
        )
    normalised = normalise_archive(
        filename=filename, content=content, limit_bytes=entry.size_mb * MIB
    )
    digest = hashlib.sha256(normalised.data).hexdigest()
    seed, _ = StorageSeed.objects.update_or_create(
        server=server,
        path=path,
        defaults={
            "filename": filename[:200],
            "archive": normalised.data,
            "sha256": digest,
            "files": normalised.files,
            "size_bytes": normalised.size_bytes,
            "uploaded_by": actor_label(actor)[:200],
            "uploaded_at": timezone.now(),
        },
    )
    audit_record(
        actor=actor,
        action="storage.seed_set",
        target=server,
        server=server,
        summary=f"{filename} ({normalised.files} files, {normalised.size_bytes} bytes) pre-fills "
        f"new volumes of {server.name} at {path}.",
        details={"path": path, "sha256": digest, "files": normalised.files},
    )
    return seed
