"""A package server's whole dependency tree, pinned: resolved once, recorded with every version
and hash, and the only thing its sandbox image is built from.

More: docs/admin.md, "Module notes"; docs/sandbox.md, "Pinned all the way down".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
from django.conf import settings
from django.utils import timezone

from registry.core.errors import ApplicationError

RESOLVE_TIMEOUT_SECONDS = 180.0
# The sandbox's Python and platform (workers/adapters/sandbox/images: Debian bookworm's 3.11).
TARGET_PYTHON = "3.11"
TARGET_PLATFORM = "x86_64-manylinux_2_36"
# Releases published together land within hours of each other.
RELEASE_MARGIN = timedelta(days=1)
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)")
_HASH = re.compile(r"--hash=(?P<hash>sha256:[0-9a-f]{64})")


class LockError(ApplicationError):
    """The dependency tree could not be resolved (the message says why and what to do)."""


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    hashes: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "hashes": list(self.hashes)}


@dataclass(frozen=True)
class PackageLock:
    registry: str  # pypi or npm
    identifier: str
    version: str
    resolver: str  # "uv 0.13.8", "npm 11.19.1"
    as_of: str  # ISO time: nothing uploaded later was considered
    packages: tuple[LockedPackage, ...]
    lockfile: str  # the requirements file, or package-lock.json, as the resolver wrote it

    @property
    def digest(self) -> str:
        """Names the exact set: registry, package, and every package's version and hashes."""
        canonical = json.dumps(
            [self.registry, self.identifier, self.version, [p.as_json() for p in self.packages]],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def as_json(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "identifier": self.identifier,
            "version": self.version,
            "resolver": self.resolver,
            "as_of": self.as_of,
            "resolved_at": timezone.now().isoformat(),
            "digest": self.digest,
            "packages": [p.as_json() for p in self.packages],
            "lockfile": self.lockfile,
        }

    def summary(self, limit: int = 8) -> str:
        """e.g. '23 packages as of 2025-04-26: mcp 1.6.0, pydantic 2.11.3, ...'."""
        others = [p for p in self.packages if p.name.lower() != self.identifier.lower()]
        shown = ", ".join(f"{p.name} {p.version}" for p in others[:limit])
        more = f", and {len(others) - limit} more" if len(others) > limit else ""
        return f"{len(self.packages)} packages as of {self.as_of[:10]}: {shown}{more}"


def lock_summary(lock: Mapping[str, Any]) -> str:
    """The same summary from a stored lock (`McpServer.package_lock`)."""
    if not lock:
        return "not locked"
    packages = [p for p in lock.get("packages", []) if isinstance(p, Mapping)]
    others = [
        p
        for p in packages
        if str(p.get("name", "")).lower() != str(lock.get("identifier", "")).lower()
    ]
    shown = ", ".join(f"{p.get('name')} {p.get('version')}" for p in others[:8])
    more = f", and {len(others) - 8} more" if len(others) > 8 else ""
    return f"{len(packages)} packages as of {str(lock.get('as_of', ''))[:10]}: {shown}{more}"


def lock_speaks_handshake_only(lock: Mapping[str, Any]) -> bool:
    """Whether the locked server is built on the official Python SDK before 2.0 (`mcp` 1.x),
    which speaks only the handshake protocol versions. Such a server must be opened with the
    handshake: the 2026-07-28 probe (`server/discover`) fails its request validation and ends
    its read loop (measured with mcp-server-sqlite 2025.4.25 on mcp 1.6.0: exit code 1)."""
    if lock.get("registry") != "pypi":
        return False
    for package in lock.get("packages", []):
        if isinstance(package, Mapping) and package.get("name") == "mcp":
            return str(package.get("version", "")).split(".")[0] in ("0", "1")
    return False


def lock_matches(lock: Mapping[str, Any], *, registry: str, identifier: str, version: str) -> bool:
    return bool(lock) and (
        lock.get("registry"),
        lock.get("identifier"),
        lock.get("version"),
    ) == (registry, identifier, version)


def _release_time(registry: str, identifier: str, version: str) -> datetime:
    """When `version` was published, as the registry says."""
    if registry == "pypi":
        where, url = "PyPI", f"{settings.TOOLROOM_PYPI_URL}/pypi/{quote(identifier, safe='')}/json"
    else:
        where, url = (
            "the npm registry",
            f"{settings.TOOLROOM_NPM_REGISTRY_URL}/{quote(identifier, safe='@')}",
        )
    try:
        response = httpx2.get(url, timeout=30.0, follow_redirects=True)
        response.raise_for_status()
        data = response.json()
        if registry == "pypi":
            stamps = [f["upload_time_iso_8601"] for f in data["releases"][version]]
            stamp = max(stamps)
        else:
            stamp = data["time"][version]
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (httpx2.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise LockError(
            f"{where} could not say when {identifier} {version} was released ({exc}); its "
            "dependencies are resolved as of that moment."
        ) from exc


def _run(argv: list[str], *, cwd: str | None = None, what: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 (argv built here, no shell)
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=RESOLVE_TIMEOUT_SECONDS,
            check=False,
            env={**os.environ, "NO_COLOR": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LockError(f"{what} did not run: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise LockError(f"{what} failed: {' '.join(tail)}")
    return done.stdout


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise LockError("uv is not installed; it resolves PyPI packages' dependencies.")
    return found


def _lock_pypi(identifier: str, version: str, as_of: datetime) -> PackageLock:
    uv = _uv()
    with tempfile.TemporaryDirectory(prefix="toolroom-lock-") as scratch:
        wanted = Path(scratch) / "requirements.in"
        wanted.write_text(f"{identifier}=={version}\n")
        text = _run(
            [
                uv, "pip", "compile", str(wanted), "--quiet", "--no-header", "--no-annotate",
                "--generate-hashes", "--python-version", TARGET_PYTHON,
                "--python-platform", TARGET_PLATFORM,
                "--exclude-newer", as_of.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "--index-url", f"{settings.TOOLROOM_PYPI_URL}/simple",
                "--no-config", "--cache-dir", str(Path(scratch) / "cache"),
            ],
            what=f"Resolving {identifier}=={version} with uv",
        )  # fmt: skip
    resolver = "uv " + _run([uv, "--version"], what="uv --version").split()[1]
    packages: list[LockedPackage] = []
    for block in re.split(r"\n(?=\S)", text.strip()):
        match = _REQUIREMENT.match(block)
        if match is None:
            continue
        hashes = tuple(sorted(m["hash"] for m in _HASH.finditer(block)))
        packages.append(LockedPackage(match["name"].lower(), match["version"], hashes))
    if not any(p.name == identifier.lower() for p in packages):
        raise LockError(f"uv's resolution of {identifier}=={version} does not hold it.")
    return PackageLock(
        registry="pypi",
        identifier=identifier,
        version=version,
        resolver=resolver,
        as_of=as_of.isoformat(),
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        lockfile=text,
    )


def _lock_npm(identifier: str, version: str, as_of: datetime) -> PackageLock:
    npm = shutil.which("npm")
    if npm is None:
        raise LockError(
            "npm is not installed here; it locks npm packages' dependencies. Install Node.js "
            "and npm, or import with TOOLROOM_IMPORT_LOCK_DEPENDENCIES=false and run `manage.py "
            "lock_dependencies` where npm is."
        )
    with tempfile.TemporaryDirectory(prefix="toolroom-lock-") as scratch:
        manifest = {
            "name": "toolroom-lock",
            "version": "0.0.0",
            "private": True,
            "dependencies": {identifier: version},
        }
        Path(scratch, "package.json").write_text(json.dumps(manifest))
        _run(
            [
                npm, "install", "--package-lock-only", "--ignore-scripts", "--omit=dev",
                "--no-audit", "--no-fund", "--silent",
                f"--before={as_of.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}",
                f"--registry={settings.TOOLROOM_NPM_REGISTRY_URL}/",
                f"--cache={Path(scratch) / 'cache'}",
            ],
            cwd=scratch,
            what=f"Resolving {identifier}@{version} with npm",
        )  # fmt: skip
        lockfile = Path(scratch, "package-lock.json").read_text()
    resolver = "npm " + _run([npm, "--version"], what="npm --version").strip()
    data = json.loads(lockfile)
    packages = []
    for path, entry in (data.get("packages") or {}).items():
        if not path or entry.get("dev") or entry.get("link"):
            continue
        name = path.rsplit("node_modules/", 1)[-1]
        integrity = entry.get("integrity")
        packages.append(
            LockedPackage(name, str(entry.get("version", "")), (integrity,) if integrity else ())
        )
    if not any(p.name == identifier and p.version == version for p in packages):
        raise LockError(f"npm's lock of {identifier}@{version} does not hold it.")
    return PackageLock(
        registry="npm",
        identifier=identifier,
        version=version,
        resolver=resolver,
        as_of=as_of.isoformat(),
        packages=tuple(sorted(packages, key=lambda p: (p.name, p.version))),
        lockfile=lockfile,
    )


def dependencies_resolve(
    *, registry: str, identifier: str, version: str, as_of: datetime | None = None
) -> PackageLock:
    """The whole dependency tree of `identifier` at `version` from `registry` ("pypi" or
    "npm"), as of `as_of` (default: the version's release, plus a day). Raises LockError."""
    if registry not in ("pypi", "npm"):
        raise LockError(f"Dependencies are locked for PyPI and npm packages, not {registry!r}.")
    key = (registry, identifier, version, as_of)
    with _cache_lock:
        kept = _cache.get(key)
        if kept is not None and time.monotonic() - kept[0] < CACHE_SECONDS:
            return kept[1]
    moment = as_of or _release_time(registry, identifier, version) + RELEASE_MARGIN
    lock = (
        _lock_pypi(identifier, version, moment)
        if registry == "pypi"
        else _lock_npm(identifier, version, moment)
    )
    with _cache_lock:
        _cache[key] = (time.monotonic(), lock)
    return lock


# An import is planned twice (checked, then confirmed): the same resolution serves both.
CACHE_SECONDS = 600.0
_cache: dict[tuple[str, str, str, datetime | None], tuple[float, PackageLock]] = {}
_cache_lock = threading.Lock()
