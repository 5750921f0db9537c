"""Storage volumes on the engine: made (owned by the sandbox's user, pre-filled from an archive),
measured, removed.

More: docs/sandbox.md, "Module notes"."""

from __future__ import annotations

import gzip
import io
import posixpath
import tarfile
from collections.abc import Mapping

import docker.errors

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.errors import SandboxError
from workers.adapters.sandbox.spec import LABEL_INSTALLATION, LABEL_MANAGED, LABEL_ROLE, NOBODY_UID

STORAGE_ROLE = "storage"
LABEL_STORAGE_SERVER = "io.toolroom.storage-server"
LABEL_STORAGE_PATH = "io.toolroom.storage-path"
LABEL_STORAGE_OWNER = "io.toolroom.storage-owner"
LABEL_STORAGE_SIZE = "io.toolroom.storage-size-mb"


def volume_exists(engine: Engine, name: str) -> bool:
    try:
        engine.volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def _initial_tar(mount_name: str, seed: bytes | None) -> bytes:
    """The volume's root folder (owner 65534, 0700), then the seed's members below it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        root = tarfile.TarInfo(mount_name)
        root.type = tarfile.DIRTYPE
        root.uid = root.gid = NOBODY_UID
        root.mode = 0o700
        tar.addfile(root)
        if seed:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(seed)), mode="r:") as source:
                for member in source.getmembers():
                    if not (member.isfile() or member.isdir()):
                        continue  # the registry wrote plain files and folders only
                    data = source.extractfile(member) if member.isfile() else None
                    member.name = f"{mount_name}/{member.name}"
                    member.uid = member.gid = NOBODY_UID
                    tar.addfile(member, data)
    return out.getvalue()


def volume_create(
    engine: Engine,
    *,
    name: str,
    image: str,
    target: str,
    installation: str,
    labels: Mapping[str, str],
    seed: bytes | None = None,
) -> None:
    """Make the volume `name` for storage at `target`, writable by the sandbox's user and
    pre-filled with `seed` (a gzip-compressed tar from the registry), labelled as the
    `installation`'s. `image` is any image on the engine (the server's own): it only gives the
    never-started container a root."""
    try:
        engine.volumes.create(
            name=name,
            driver="local",
            labels={
                **labels,
                LABEL_MANAGED: "true",
                LABEL_ROLE: STORAGE_ROLE,
                LABEL_INSTALLATION: installation,
            },
        )
        parent, mount_name = posixpath.split(posixpath.normpath(target))
        holder = engine.api.create_container(
            image,
            command=["true"],
            network_disabled=True,
            labels={LABEL_MANAGED: "true", LABEL_ROLE: "storage-init"},
            host_config=engine.api.create_host_config(
                network_mode="none",
                mounts=[docker.types.Mount(target, name, type="volume")],
            ),
        )
        try:
            if not engine.api.put_archive(
                holder["Id"], parent or "/", _initial_tar(mount_name, seed)
            ):
                raise SandboxError(f"The engine did not take the files of the volume {name}.")
        finally:
            engine.api.remove_container(holder["Id"], force=True)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"The storage volume {name} could not be made: {exc}") from exc


def _installation_storage(labels: Mapping[str, str] | None, installation: str) -> bool:
    labels = labels or {}
    return labels.get(LABEL_ROLE) == STORAGE_ROLE and labels.get(LABEL_INSTALLATION) == installation


def volume_usage(engine: Engine, *, installation: str) -> dict[str, int]:
    """Bytes each storage volume of the installation holds, as the engine measures them (another
    installation sharing the engine has volumes of its own, never counted or touched here)."""
    try:
        volumes = engine.df().get("Volumes") or []
    except docker.errors.DockerException as exc:
        raise SandboxError(f"The engine could not measure its volumes: {exc}") from exc
    return {
        volume["Name"]: int((volume.get("UsageData") or {}).get("Size", 0))
        for volume in volumes
        if _installation_storage(volume.get("Labels"), installation)
    }


def storage_volume_names(engine: Engine, *, installation: str) -> list[str]:
    """Every storage volume of the installation on the engine."""
    try:
        found = engine.volumes.list(
            filters={
                "label": [f"{LABEL_ROLE}={STORAGE_ROLE}", f"{LABEL_INSTALLATION}={installation}"]
            }
        )
    except docker.errors.DockerException as exc:
        raise SandboxError(f"The engine could not list its volumes: {exc}") from exc
    return [volume.name for volume in found]


def volume_remove(engine: Engine, name: str) -> bool:
    """Remove a volume; False while a container still uses it (try again later)."""
    try:
        engine.volumes.get(name).remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:
        if exc.status_code == 409:  # in use
            return False
        raise SandboxError(f"The storage volume {name} could not be removed: {exc}") from exc
    return True
