"""The egress proxy's image: the standard-library proxy program (egress_proxy.py) on the base
image, tagged by a hash of the program and the base."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
