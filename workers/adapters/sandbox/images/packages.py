"""One pinned package's image, from PyPI or npm: the name and version checked, then the
registry's own recipe (images.pypi, images.npm)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, Literal

from workers.adapters.sandbox.engine import Engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.images.base import BASE_IMAGE, NODE_BASE_IMAGE
from workers.adapters.sandbox.images.build import ImageRef, Say, _quiet, _sanitise
from workers.adapters.sandbox.images.npm import _NPM_NAME, _build_npm_image
from workers.adapters.sandbox.images.pypi import _PYPI_NAME, build_python_image

PackageRegistry = Literal["pypi", "npm"]
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,100}$")


def build_package_image(
    registry: PackageRegistry,
    identifier: str,
    version: str,
    *,
    base: str | None = None,
    engine: Engine | None = None,
    host_python: str = sys.executable,
    lock: Mapping[str, Any] | None = None,
    force: bool = False,
    say: Say = _quiet,
) -> ImageRef:
    """An image running the pinned package `identifier==version` from PyPI or npm.

    Files are fetched on this host; the build has no network. The same package, version and base
    reuse the image; a rebuilt base or another version builds a new one. With `lock` (the
    server's recorded dependency lock) exactly the locked set is installed, hashes checked.
    """
    if lock and (lock.get("registry"), lock.get("identifier"), lock.get("version")) != (
        registry,
        identifier,
        version,
    ):
        raise ImageBuildError(
            f"The dependency lock is for {lock.get('identifier')} {lock.get('version')}, not "
            f"{identifier} {version}."
        )
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
            lock=lock,
            force=force,
            say=say,
        )
    if registry == "npm":
        if not _NPM_NAME.match(identifier):
            raise ImageBuildError(f"{identifier!r} is not an npm package name.")
        return _build_npm_image(
            identifier,
            version,
            base=base or NODE_BASE_IMAGE,
            engine=engine,
            force=force,
            say=say,
            lock=lock,
        )
    raise ImageBuildError(f"Package registry {registry!r} is not pypi or npm.")
