"""Making the sandbox ready on this engine: build the base images (and the egress proxy's
image) that the registered sandboxed servers need and are missing, record the progress for the
admin, then have those servers discovered again.

`make run` starts this in the background (`manage.py sandbox prepare`), so a fresh machine with
an engine ends with the demo's sandboxed servers discovered without anyone building by hand;
where no engine answers, it records that once, with the command that fixes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from registry.servers.jobs.sandbox_preparation import (
    FIX_COMMAND,
    sandbox_needs,
    sandbox_preparation_record,
    sandbox_servers_rediscover,
)
from registry.servers.models import SandboxPreparationState
from workers.adapters.sandbox import (
    BASE_IMAGE,
    NODE_BASE_IMAGE,
    EngineUnavailableError,
    ImageBuildError,
    SandboxError,
    build_base_image,
    build_proxy_image,
    connect_engine,
    image_digest,
)

Say = Callable[[str], None]
ACTOR = "worker:sandbox-prepare"
APT_TIMEOUT = 600


def _ensure_debootstrap(say: Say) -> None:
    """debootstrap builds the base images: on a fresh Debian machine (root, apt) install it the
    way scripts/ensure-sandbox-image does; elsewhere the build's own error names what is missing."""
    if shutil.which("debootstrap") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    say("sandbox: installing Debian's debootstrap (it builds the base images)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    output = ""
    # Without package lists (a fresh machine) the first install fails: update, then again.
    for argv in (["install", "-y", "-qq", "debootstrap"], ["update", "-qq"]) * 2:
        done = subprocess.run(  # noqa: S603 - fixed argv lists, never a shell
            ["apt-get", *argv],  # noqa: S607 - apt-get from PATH, as scripts/ensure-sandbox-image
            env=env,
            capture_output=True,
            text=True,
            timeout=APT_TIMEOUT,
            check=False,
        )
        output = (done.stdout + done.stderr).strip()
        if shutil.which("debootstrap"):
            return
    raise ImageBuildError(
        "debootstrap could not be installed with apt-get: " + (output.splitlines() or ["?"])[-1]
    )


def prepare_sandbox(*, say: Say) -> str:
    """Build what is missing, record progress, request discoveries; returns the final state."""
    needs = sandbox_needs()
    try:
        engine = connect_engine()
    except EngineUnavailableError as exc:
        sandbox_preparation_record(
            state=SandboxPreparationState.NO_ENGINE,
            step="sandboxed servers cannot run on this machine.",
            detail=f"{exc.message} To install and start one and build the sandbox's images, "
            f"run: {FIX_COMMAND}",
            restart=True,
        )
        say(f"sandbox: no Docker engine answers; sandboxed servers cannot run. Fix: {FIX_COMMAND}")
        return SandboxPreparationState.NO_ENGINE
    try:
        steps: list[tuple[str, Callable[[], object]]] = []
        if image_digest(engine, BASE_IMAGE) is None:
            steps.append(
                (f"building {BASE_IMAGE}", lambda: build_base_image(engine=engine, say=say))
            )
        if needs.node and image_digest(engine, NODE_BASE_IMAGE) is None:
            steps.append(
                (
                    f"building {NODE_BASE_IMAGE}",
                    lambda: build_base_image(
                        engine=engine, reference=NODE_BASE_IMAGE, node=True, say=say
                    ),
                )
            )
        if needs.proxy:
            # Cheap when it is there (its tag is a hash of its inputs); built on the base.
            steps.append(("the egress proxy's image", lambda: build_proxy_image(engine=engine)))
        if any(label.startswith("building") for label, _build in steps):
            steps.insert(0, ("installing debootstrap", lambda: _ensure_debootstrap(say)))
        total = len(steps)
        for done, (label, build) in enumerate(steps):
            sandbox_preparation_record(
                state=SandboxPreparationState.BUILDING,
                step=label,
                steps_done=done,
                steps_total=total,
                restart=done == 0,
            )
            say(f"sandbox: {done + 1}/{total} {label}")
            build()
    except SandboxError as exc:
        sandbox_preparation_record(
            state=SandboxPreparationState.FAILED,
            step="Building the sandbox's images failed.",
            detail=f"{exc.message} Build them by hand with: {FIX_COMMAND}",
        )
        say(f"sandbox: building the images failed: {exc.message}")
        return SandboxPreparationState.FAILED
    finally:
        engine.close()
    sandbox_preparation_record(
        state=SandboxPreparationState.READY,
        step=f"The sandbox's images are on the engine ({needs.servers} sandboxed server(s)).",
        steps_done=total,
        steps_total=total,
        restart=total == 0,
    )
    requested = sandbox_servers_rediscover(actor=ACTOR)
    say("sandbox: images ready" + (f"; discovering {', '.join(requested)}" if requested else ""))
    return SandboxPreparationState.READY
