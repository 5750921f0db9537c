"""Images of npm servers: the pinned package and its dependencies fetched and installed on the
host (`npm pack`, `npm install --ignore-scripts`: no package code runs there), node_modules copied
onto the Node base."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.images.build import (
    _PATH_ENV,
    RECIPE_VERSION,
    ImageRef,
    Say,
    _base_id,
    _build_server_image,
    _Context,
    _default_command,
    _existing,
    _image_ref,
    _inputs_hash,
    _run,
    _sanitise,
)
from workers.adapters.sandbox.spec import NOBODY

_NPM_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._~-]{0,100}/)?[a-z0-9][a-z0-9._~-]{0,200}$")


def _build_npm_image(
    identifier: str,
    version: str,
    *,
    base: str,
    engine: Engine | None,
    force: bool,
    say: Say,
    lock: Mapping[str, Any] | None = None,
) -> ImageRef:
    """With `lock` (a recorded package-lock.json), `npm ci` installs exactly the locked tree,
    every tarball checked against its integrity hash; the tag is made from the lock's digest."""
    engine = engine or connect_engine()
    inputs = {
        "recipe": RECIPE_VERSION,
        "kind": "npm",
        "base": _base_id(engine, base),
        "package": f"{identifier}@{version}",
        **({"lock": str(lock["digest"])} if lock else {}),
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
        if lock:
            say(f"fetching the locked tree of {identifier}@{version} (integrity checked)")
            project = {
                "name": "toolroom-server",
                "version": "0.0.0",
                "private": True,
                "dependencies": {identifier: version},
            }
            (stage / "package.json").write_text(json.dumps(project))
            (stage / "package-lock.json").write_text(str(lock["lockfile"]))
            # Scripts never run on the host: an install script is the package's code, not ours.
            _run(
                [
                    npm, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund",
                    "--silent",
                ],
                step="npm ci (the locked tree)",
                cwd=str(stage),
            )  # fmt: skip
        else:
            say(f"fetching {identifier}@{version} and its dependencies on the host")
            _run(
                [
                    npm, "pack", "--silent", "--pack-destination", str(packed),
                    f"{identifier}@{version}",
                ],
                step="npm pack",
            )  # fmt: skip
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
