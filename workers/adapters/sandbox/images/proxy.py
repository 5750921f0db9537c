"""The egress proxy's image: the standard-library proxy program (egress_proxy.py) and the network
guard it applies (registry/core/netguard.py, laid out as its package) on the base image, tagged by
a hash of those files and the base."""

from __future__ import annotations

import hashlib
from pathlib import Path

from registry.core import netguard
from workers.adapters.sandbox import egress_proxy
from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.images.base import BASE_IMAGE
from workers.adapters.sandbox.images.build import (
    RECIPE_VERSION,
    ImageRef,
    Say,
    _base_id,
    _Context,
    _dockerfile_run,
    _engine_build,
    _existing,
    _image_ref,
    _inputs_hash,
    _quiet,
)
from workers.adapters.sandbox.spec import LABEL_MANAGED, LABEL_ROLE, NOBODY

PROXY_REPOSITORY = "toolroom/egress-proxy"


PROGRAM_DIR = "/opt/toolroom"


def proxy_program_files() -> dict[str, bytes]:
    """The proxy program's files, by path under PROGRAM_DIR: the program and, where its import
    finds it (the program's own directory comes first on its path), the network guard. The
    packages' `__init__` files are empty: nothing but the guard is imported."""
    return {
        "egress_proxy.py": Path(egress_proxy.__file__).read_bytes(),
        "registry/__init__.py": b"",
        "registry/core/__init__.py": b"",
        "registry/core/netguard.py": Path(netguard.__file__).read_bytes(),
    }


def proxy_image_reference(engine: Engine, *, base: str = BASE_IMAGE) -> str:
    """The proxy image's tag for this proxy program on this base."""
    program = hashlib.sha256()
    for path, content in sorted(proxy_program_files().items()):
        program.update(f"{path}\0{len(content)}\0".encode())
        program.update(content)
    inputs = {"recipe": RECIPE_VERSION, "kind": "proxy", "base": _base_id(engine, base)}
    inputs["program"] = program.hexdigest()
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
    files = proxy_program_files()
    context = _Context(files={f"program/{path}": content for path, content in files.items()})
    context.dockerfile = [
        f"FROM {_base_id(engine, base)}",
        "USER 0:0",
        f"COPY program/ {PROGRAM_DIR}/",
        _dockerfile_run(["python3", "-m", "compileall", "-q", PROGRAM_DIR]),
        f"USER {NOBODY}",
        f'CMD ["python3", "-E", "-s", "-S", "{PROGRAM_DIR}/egress_proxy.py"]',
    ]
    labels = {LABEL_MANAGED: "true", LABEL_ROLE: "proxy-image"}
    say(f"building {reference}")
    image = _engine_build(engine, context, reference=reference, labels=labels, say=say)
    say(f"{reference} built ({image.id[:19]})")
    return _image_ref(image, reference, built=True)
