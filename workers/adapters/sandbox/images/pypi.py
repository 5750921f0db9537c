"""Images of Python servers: wheels for the requirements (a pinned PyPI package, or the test
servers) fetched on the host for the base image's own Python, installed offline into a venv at
/opt/server in a multi-stage build with no network inside."""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker.errors

from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.images.base import BASE_IMAGE
from workers.adapters.sandbox.images.build import (
    _PATH_ENV,
    RECIPE_VERSION,
    ImageRef,
    Say,
    _base_id,
    _build_server_image,
    _Context,
    _default_command,
    _dockerfile_run,
    _existing,
    _image_ref,
    _inputs_hash,
    _quiet,
    _run,
    image_digest,
)
from workers.adapters.sandbox.spec import NOBODY

# The Python of the base image: wheels are fetched for it.
BASE_PYTHON = (3, 11)
_PYPI_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,200}[A-Za-z0-9])?$")


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


def image_python_version(engine: Engine, image: str) -> str:
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


def fetch_wheels(
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


def _fetch_locked_wheels(
    lockfile: str, into: Path, *, host_python: str, say: Say, target_python: str
) -> None:
    """Exactly the locked set: every file checked against the lock's hashes (pip's
    --require-hashes), nothing resolved again (--no-deps); plus pip itself to install them."""
    python = _host_python(host_python)
    requirements = into.parent / "requirements.lock"
    requirements.write_text(lockfile)
    say("fetching the locked dependency set on the host (hashes checked)")
    platforms = [arg for tag in _MANYLINUX_PLATFORMS for arg in ("--platform", tag)]
    try:
        _run(
            [
                python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--no-deps", "--require-hashes", "--only-binary=:all:",
                "--python-version", target_python, "--implementation", "cp", *platforms,
                "--dest", str(into), "-r", str(requirements),
            ],
            step="pip download (the locked set, hashes checked)",
        )  # fmt: skip
    except ImageBuildError:
        say("a locked package has no wheel for the image's Python; building wheels on the host")
        _run(
            [
                python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                "--no-deps", "--require-hashes", "--wheel-dir", str(into), "-r", str(requirements),
            ],
            step="pip wheel (the locked set, hashes checked)",
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
    lock: Mapping[str, Any] | None = None,
    force: bool = False,
    say: Say = _quiet,
) -> ImageRef:
    """An image with `requirements` installed offline into a venv at /opt/server (on PATH).

    With `lock` (a recorded dependency lock: its `lockfile`, `packages` and `digest`), exactly
    the locked packages are installed, their files checked against the lock's hashes, nothing
    resolved again; the tag is made from the lock's digest, so the same lock builds the same set.

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
        **({"lock": str(lock["digest"])} if lock else {}),
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
        if lock:
            _fetch_locked_wheels(
                str(lock["lockfile"]),
                wheels,
                host_python=host_python,
                say=say,
                target_python=image_python_version(engine, base_id),
            )
            install = [
                "--no-deps",
                *(f"{p['name']}=={p['version']}" for p in lock["packages"]),
            ]
        else:
            fetch_wheels(
                requirements,
                wheels,
                host_python=host_python,
                say=say,
                target_python=image_python_version(engine, base_id),
            )
            install = list(requirements)
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
                    *install,
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
