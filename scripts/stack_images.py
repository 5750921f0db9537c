"""Build the production stack's images here, with no registry (`make images`).

    .venv/bin/python scripts/stack_images.py [--force] [NAME...]

NAME is python, postgresql, redis, haproxy or toolroom (default: all). The first four are
Debian root filesystems made by debootstrap from the mirror in apt's own sources, with Debian's
`python3`, `postgresql`, `redis-server` and `haproxy` packages, imported into the engine the way
the sandbox's base image is (workers/adapters/sandbox/images/base.py). The last is Toolroom's own
image (the Dockerfile) on that Python base, its dependencies installed from wheels fetched on the
host (deploy/wheels/), since the engine's builds have no network here. Their names are the ones
deploy/local-images.env gives docker-compose.yml.

Each image carries a label with a hash of its inputs (the recipe, the packages, the files it is
made of, its base); an image whose label matches is kept, so a second run takes seconds. The
Debian packages themselves are not an input: `--force` rebuilds with the mirror's current ones.
Needs root and debootstrap for the Debian images (scripts/ensure-sandbox-image installs it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workers.adapters.sandbox.engine import connect_engine
from workers.adapters.sandbox.errors import ImageBuildError
from workers.adapters.sandbox.images import (
    DEBIAN_SUITE,
    apt_mirror,
    fetch_wheels,
    image_python_version,
    trim_rootfs,
)

ROOT = Path(__file__).resolve().parent.parent
LOCAL_IMAGES = ROOT / "deploy" / "local-images.env"
WHEELS = ROOT / "deploy" / "wheels"
LABEL_INPUTS = "io.toolroom.stack-image-inputs"
# Bump when a recipe changes in a way its listed inputs do not show.
RECIPE_VERSION = "1"
# Where wheels fetched for one set of requirements are kept between runs (and CI's fresh clones).
WHEEL_CACHE = Path(
    os.environ.get("TOOLROOM_WHEEL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toolroom" / "wheels"
)
# What Toolroom's image is built from (the Dockerfile's COPY lines), hashed as its inputs.
TOOLROOM_CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "manage.py")
TOOLROOM_CONTEXT_FOLDERS = ("registry", "workers", "templates")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_POSTGRES_BIN = "/usr/lib/postgresql/15/bin"


@dataclass(frozen=True)
class DebianImage:
    """A Debian root filesystem with some packages, set up and imported as an image."""

    name: str
    variable: str  # its name in deploy/local-images.env
    packages: tuple[str, ...]
    # Dockerfile instructions `docker import --change` takes (ENV, USER, WORKDIR, VOLUME, EXPOSE,
    # ENTRYPOINT, CMD, LABEL; not STOPSIGNAL: docker-compose.yml sets stop_signal instead).
    config: tuple[str, ...]
    # Shell commands run in the root filesystem (chroot) after the packages are in.
    setup: tuple[str, ...] = ()
    # Files put into the image, executable: path in the image -> file in this repository.
    files: Mapping[str, str] = field(default_factory=dict)


DEBIAN_IMAGES = (
    DebianImage(
        name="python",
        variable="TOOLROOM_PYTHON_IMAGE",
        # The Dockerfile adds its user (passwd, in minbase) and makes the venv without pip.
        packages=("python3", "ca-certificates", "tzdata"),
        config=(f"ENV PATH={_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]'),
    ),
    DebianImage(
        name="postgresql",
        variable="TOOLROOM_POSTGRES_IMAGE",
        packages=("postgresql",),
        config=(
            f"ENV PATH={_POSTGRES_BIN}:{_PATH}",
            "ENV LANG=C.UTF-8",
            "ENV PGDATA=/var/lib/postgresql/data",
            "USER postgres",
            "VOLUME /var/lib/postgresql/data",
            "EXPOSE 5432",
            'ENTRYPOINT ["/usr/local/bin/postgresql-entrypoint"]',
            'CMD ["postgres"]',
        ),
        setup=(
            # The package's own cluster is not used: the entry point makes one in $PGDATA.
            "rm -rf /etc/postgresql/15/main /var/lib/postgresql/15",
            "install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data",
            "install -d -o postgres -g postgres -m 2775 /run/postgresql",
        ),
        files={"/usr/local/bin/postgresql-entrypoint": "deploy/images/postgresql-entrypoint"},
    ),
    DebianImage(
        name="redis",
        variable="TOOLROOM_REDIS_IMAGE",
        packages=("redis-server",),
        config=(
            f"ENV PATH={_PATH}",
            "USER redis",
            "WORKDIR /data",
            "VOLUME /data",
            "EXPOSE 6379",
            'CMD ["redis-server"]',
        ),
        setup=("install -d -o redis -g redis -m 0750 /data",),
    ),
    DebianImage(
        name="haproxy",
        variable="TOOLROOM_HAPROXY_IMAGE",
        packages=("haproxy",),
        config=(
            f"ENV PATH={_PATH}",
            "USER haproxy",
            'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
        ),
        setup=("install -d /usr/local/etc/haproxy",),
    ),
)
NAMES = (*(image.name for image in DEBIAN_IMAGES), "toolroom")


def say(message: str) -> None:
    print(f"stack-images: {message}", flush=True)


def local_images() -> dict[str, str]:
    """The image names deploy/local-images.env gives (variable -> image)."""
    names: dict[str, str] = {}
    for raw in LOCAL_IMAGES.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            names[key.strip()] = value.strip()
    return names


def _run(argv: Sequence[str], *, step: str, stdin: int | None = None) -> str:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, stdin=stdin, timeout=3600
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise ImageBuildError(f"{step} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _inputs_hash(inputs: object) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]


def _labels(reference: str) -> dict[str, str] | None:
    """The image's labels, or None when the engine has no such image."""
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", reference],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        return None
    return json.loads(done.stdout) or {}


def _image_id(reference: str) -> str:
    return _run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference], step="docker inspect"
    ).strip()


def _kept(reference: str, inputs_hash: str, *, force: bool) -> bool:
    labels = _labels(reference)
    if not force and labels is not None and labels.get(LABEL_INPUTS) == inputs_hash:
        say(f"{reference} is up to date; kept")
        return True
    why = "missing" if labels is None else "--force" if force else "its inputs changed"
    say(f"building {reference} ({why})")
    return False


def build_debian_image(image: DebianImage, *, reference: str, force: bool) -> None:
    """debootstrap the packages, set the root filesystem up, import it as `reference`."""
    files = {target: (ROOT / source).read_bytes() for target, source in image.files.items()}
    inputs_hash = _inputs_hash(
        {
            "recipe": RECIPE_VERSION,
            "suite": DEBIAN_SUITE,
            "packages": image.packages,
            "config": image.config,
            "setup": image.setup,
            "files": {path: hashlib.sha256(data).hexdigest() for path, data in files.items()},
        }
    )
    if _kept(reference, inputs_hash, force=force):
        return
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise ImageBuildError(
            f"{reference} is made with debootstrap, which needs root and Debian's debootstrap "
            "package (scripts/ensure-sandbox-image installs it)."
        )
    started = time.monotonic()
    # /var/tmp: on disk (a root filesystem is large) and not noexec (debootstrap runs programs).
    scratch = Path(tempfile.mkdtemp(prefix="toolroom-stack-rootfs-", dir="/var/tmp"))
    try:
        rootfs = scratch / "rootfs"
        packages = ",".join(image.packages)
        say(f"debootstrap {DEBIAN_SUITE} with {packages}")
        _run(
            ["debootstrap", "--variant=minbase", f"--include={packages}", DEBIAN_SUITE,
             str(rootfs), apt_mirror()],
            step="debootstrap",
        )  # fmt: skip
        for target, data in files.items():
            path = rootfs / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(0o755)
        for command in image.setup:
            _run(["chroot", str(rootfs), "sh", "-c", command], step=f"{reference}: {command}")
        trim_rootfs(rootfs)
        changes = [*image.config, f"LABEL {LABEL_INPUTS}={inputs_hash}"]
        change_args = [arg for change in changes for arg in ("--change", change)]
        say(f"importing the root filesystem as {reference}")
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
        )
        assert tar.stdout is not None  # noqa: S101 - stdout=PIPE above
        try:
            _run(["docker", "import", *change_args, "-", reference], step="docker import",
                 stdin=tar.stdout.fileno())  # fmt: skip
        finally:
            # Closed here too, so a tar still writing after a failed import ends (SIGPIPE).
            tar.stdout.close()
            packed = tar.wait()
        if packed != 0:
            raise ImageBuildError(f"tar of the root filesystem failed (exit {packed})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"{reference} built in {time.monotonic() - started:.0f} s")


def _context_files() -> Iterator[Path]:
    for name in TOOLROOM_CONTEXT:
        yield ROOT / name
    for folder in TOOLROOM_CONTEXT_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path


def _requirements() -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as stream:
        dependencies: list[str] = tomllib.load(stream)["project"]["dependencies"]
    return dependencies


def _wheels_for(requirements: list[str], *, python_image: str) -> Path:
    """Wheels for `requirements` and the image's Python, fetched once per set of requirements."""
    engine = connect_engine()
    target_python = image_python_version(engine, python_image)
    key = _inputs_hash(
        {"recipe": RECIPE_VERSION, "requirements": requirements, "python": target_python}
    )
    cached = WHEEL_CACHE / key
    if (cached / "_pip").is_dir():
        say(f"wheels for Python {target_python} are in {cached}; reused")
        return cached
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{key}.partial.", dir=WHEEL_CACHE))
    try:
        fetch_wheels(
            requirements, partial, host_python=sys.executable, say=say, target_python=target_python
        )
        _complete_for_image(requirements, partial, python_image=python_image)
        partial.rename(cached)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return cached


def _complete_for_image(requirements: list[str], wheels: Path, *, python_image: str) -> None:
    """Fetch what the image's own Python needs beyond what the host resolved.

    pip evaluates environment markers with the Python it runs on, not the `--python-version` it
    is given: a dependency only an older micro version needs is left out (redis needs
    async-timeout below Python 3.11.3, and Debian's is 3.11.2). So the image's Python resolves
    the wheels offline (pip's dry run, no network; --target as the Dockerfile's venv would, where
    Debian's own site-packages refuse pip) and whatever it misses is fetched, until nothing is
    missing.
    """
    pip = f"/wheels/_pip/{next((wheels / '_pip').glob('pip-*.whl')).name}/pip"
    target_python = image_python_version(connect_engine(), python_image)
    for _round in range(5):
        check = subprocess.run(
            ["docker", "run", "--rm", "--network=none", "--volume", f"{wheels}:/wheels:ro",
             python_image, "python3", pip, "install", "--dry-run", "--target=/tmp/target",
             "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--find-links",
             "/wheels", *requirements],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if check.returncode == 0:
            return
        missing = re.findall(r"No matching distribution found for ([^;\s]+)", check.stderr)
        if not missing:
            raise ImageBuildError(
                f"pip in {python_image} cannot install the wheels:\n{check.stderr}"
            )
        say(f"Python {target_python} in the image also needs {', '.join(missing)}")
        fetch_wheels(
            missing, wheels, host_python=sys.executable, say=say, target_python=target_python
        )
    raise ImageBuildError(f"the wheels for {python_image} are still incomplete after 5 rounds")


def build_toolroom_image(*, reference: str, python_image: str, force: bool) -> None:
    """Toolroom's image (the Dockerfile) on `python_image`, dependencies from host wheels."""
    digest = hashlib.sha256()
    for path in _context_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    requirements = _requirements()
    inputs_hash = _inputs_hash(
        {"recipe": RECIPE_VERSION, "base": _image_id(python_image), "context": digest.hexdigest()}
    )
    if _kept(reference, inputs_hash, force=force):
        return
    started = time.monotonic()
    wheels = _wheels_for(requirements, python_image=python_image)
    for stale in WHEELS.iterdir():
        if stale.name != ".gitignore":
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    shutil.copytree(wheels, WHEELS, dirs_exist_ok=True)
    say(f"docker build {reference} on {python_image}")
    _run(
        ["docker", "build", "--build-arg", f"PYTHON_IMAGE={python_image}",
         "--label", f"{LABEL_INPUTS}={inputs_hash}", "--tag", reference, str(ROOT)],
        step=f"docker build {reference}",
    )  # fmt: skip
    say(f"{reference} built in {time.monotonic() - started:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(NAMES)}")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    options = parser.parse_args(argv)
    if unknown := set(options.names) - set(NAMES):
        parser.error(f"unknown image {', '.join(sorted(unknown))} (known: {', '.join(NAMES)})")
    wanted = set(options.names or NAMES)
    names = local_images()
    started = time.monotonic()
    try:
        for image in DEBIAN_IMAGES:
            if image.name in wanted:
                build_debian_image(image, reference=names[image.variable], force=options.force)
        if "toolroom" in wanted:
            build_toolroom_image(
                reference=os.environ.get("TOOLROOM_IMAGE") or "toolroom:local",
                python_image=names["TOOLROOM_PYTHON_IMAGE"],
                force=options.force,
            )
    except ImageBuildError as exc:
        print(f"stack-images: {exc}", file=sys.stderr)
        return 1
    say(f"images ready in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
