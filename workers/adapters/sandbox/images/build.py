"""What every sandbox image build shares: the image reference, the engine's build (with no network
inside) of a Dockerfile and files, the tag made from a hash of everything that went in, and the
finishing of a server image (its default command and the labels that describe it)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.spec import LABEL_MANAGED, LABEL_ROLE

LABEL_NODE_VERSION = "io.toolroom.node-version"
# Bump when a recipe below changes in a way its inputs do not show.
RECIPE_VERSION = "3"  # 3: dependencies resolved for the image's own Python

LABEL_INPUTS = "io.toolroom.image-inputs"
LABEL_COMMANDS = "io.toolroom.commands"

Say = Callable[[str], None]

_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageRef:
    """An image on the engine: the tag to run it by, and its digest (the engine's image ID).

    `commands` are the programs the package installed (its console scripts or npm bins).
    """

    reference: str
    digest: str
    commands: tuple[str, ...] = ()
    built: bool = False
    node_version: str = ""  # the Node.js in the image (the Node base's, inherited), if any


def _quiet(_: str) -> None:
    pass


def _existing(engine: Engine, reference: str) -> Any | None:
    try:
        return engine.images.get(reference)
    except docker.errors.ImageNotFound:
        return None


def _image_ref(image: Any, reference: str, *, built: bool) -> ImageRef:
    labels = image.labels or {}
    commands = tuple(json.loads(labels.get(LABEL_COMMANDS, "[]")))
    return ImageRef(
        reference=reference,
        digest=image.id,
        commands=commands,
        built=built,
        node_version=labels.get(LABEL_NODE_VERSION, ""),
    )


def image_digest(engine: Engine, reference: str) -> str | None:
    """The image ID of `reference` on the engine, or None when the engine does not have it."""
    image = _existing(engine, reference)
    return None if image is None else str(image.id)


def _run(argv: Sequence[str], *, step: str, cwd: str | None = None, timeout: float = 1800) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - an argv list, never a shell
            list(argv),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{step}: {argv[0]} is not installed here.") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"{step}: {argv[0]} took longer than {timeout:.0f} s.") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"{step} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


@dataclass
class _Context:
    """A build context: a Dockerfile and files, as a tar archive handed to the engine."""

    dockerfile: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    folders: dict[str, Path] = field(default_factory=dict)

    def tar(self, into: io.BufferedRandom | Any) -> None:
        with tarfile.open(fileobj=into, mode="w") as archive:
            self._add(archive, "Dockerfile", ("\n".join(self.dockerfile) + "\n").encode())
            for name, data in sorted(self.files.items()):
                self._add(archive, name, data)
            for name, folder in sorted(self.folders.items()):
                archive.add(str(folder), arcname=name, filter=_normalise_member)
        into.seek(0)

    @staticmethod
    def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(data))


def _normalise_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    # Readable by everyone, writable by no one but root; keep the execute bits.
    info.mode = (info.mode & 0o755) | (0o444 if info.isfile() else 0o555)
    return info


def _inputs_hash(inputs: Mapping[str, Any]) -> str:
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _base_id(engine: Engine, base: str) -> str:
    image = _existing(engine, base)
    if image is None:
        hint = " --node" if "node" in base else ""
        raise ImageBuildError(
            f"The base image {base} is not on the engine: build it with "
            f"`python manage.py sandbox build-base{hint}` (or scripts/ensure-sandbox-image)."
        )
    return str(image.id)


def _engine_build(
    engine: Engine,
    context: _Context,
    *,
    reference: str,
    labels: Mapping[str, str],
    say: Say,
) -> Any:
    """Build `context` with no network inside, tagging it `reference`; the built image."""
    with tempfile.TemporaryFile() as archive:
        context.tar(archive)
        output: list[str] = []
        try:
            for chunk in engine.api.build(
                fileobj=archive,
                custom_context=True,
                tag=reference,
                rm=True,
                forcerm=True,
                pull=False,
                network_mode="none",
                labels=dict(labels),
                decode=True,
                use_config_proxy=False,
            ):
                if "stream" in chunk:
                    text = str(chunk["stream"]).rstrip()
                    if text:
                        output.append(text)
                        if text.startswith("Step "):
                            say(text)
                if "error" in chunk:
                    tail = "\n".join([*output[-12:], str(chunk["error"]).strip()])
                    raise ImageBuildError(f"Building {reference} failed:\n{tail}")
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"Building {reference} failed: {exc}") from exc
    image = _existing(engine, reference)
    if image is None:
        raise ImageBuildError(
            f"Building {reference} produced no image:\n" + "\n".join(output[-12:])
        )
    return image


def _dockerfile_run(argv: Sequence[str]) -> str:
    """A RUN line in exec form: an argv list, never a shell string."""
    return "RUN " + json.dumps(list(argv))


def _default_command(commands: Sequence[str], package: str) -> list[str]:
    """The package's own program: the command named like it, else its only one."""
    named = [c for c in commands if c.lower() == package.rsplit("/", 1)[-1].lower()]
    if named:
        return named[:1]
    return list(commands) if len(commands) == 1 else []


def _build_server_image(
    engine: Engine,
    context: _Context,
    *,
    reference: str,
    inputs: Mapping[str, Any],
    commands: Sequence[str],
    default_command: Sequence[str],
    say: Say,
) -> ImageRef:
    """Finish a server image's recipe (its default command, the labels that describe it) and
    build it with no network inside."""
    if default_command:
        context.dockerfile.append("CMD " + json.dumps(list(default_command)))
    labels = {
        LABEL_MANAGED: "true",
        LABEL_ROLE: "server-image",
        LABEL_INPUTS: json.dumps(inputs, sort_keys=True),
        LABEL_COMMANDS: json.dumps(list(commands)),
    }
    say(f"building {reference} (no network inside the build)")
    image = _engine_build(engine, context, reference=reference, labels=labels, say=say)
    say(f"{reference} built ({image.id[:19]})")
    return _image_ref(image, reference, built=True)


def _sanitise(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:100] or "package"
