"""From a server's launch plan to a session in a hardened container (the sandbox adapter).

Which image: the server's own image reference (it must already be on the engine, since no
registry can be assumed reachable), else an image built from its pinned package (PyPI or npm,
from files fetched on this host; an existing image with the same inputs is reused), else the
base image running the server's command. The image's digest is recorded on the server, so the
admin sees exactly what ran. Limits and the network mode come from the plan, which the registry
has already checked against the trust tier and the data sensitivity.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from django.conf import settings
from django.db import close_old_connections

from registry.servers.importing.launchers import (
    Launcher,
    LauncherError,
    is_launcher,
    launcher_parse,
)
from registry.servers.jobs.launch import LaunchPlan
from registry.servers.jobs.runtime import server_sandbox_image_record
from registry.servers.jobs.sandbox_preparation import sandbox_egress_allowlists
from workers.adapters.mcp_client import McpFailure, TransportTarget
from workers.adapters.sandbox import (
    BASE_IMAGE,
    EGRESS_POOL,
    NODE_BASE_IMAGE,
    ContainerSpec,
    ImageRef,
    SandboxError,
    SandboxSpecError,
    build_package_image,
    build_proxy_image,
    connect_engine,
    egress_policy,
    image_digest,
    remove_orphans,
    remove_stale_egress,
    remove_surplus_egress_networks,
    sandbox_transport,
)
from workers.adapters.sandbox.spec import StorageMount
from workers.sandbox_storage import storage_after_session, storage_mounts

logger = logging.getLogger(__name__)

_NODE_PROGRAMS = frozenset({"node", "npx", "npm"})


def sandbox_owner() -> str:
    """The owner label of this worker's containers (the janitor's key)."""
    return str(settings.TOOLROOM_SANDBOX_OWNER or socket.gethostname())


def sandbox_installation() -> str:
    """The installation label of everything this Toolroom makes on the engine: every clean-up
    is limited to it (another installation may share the engine)."""
    return str(settings.TOOLROOM_INSTALLATION)


def sandbox_janitor(*, owner: str | None) -> list[str]:
    """Remove what dead workers of `owner` (None: of every owner) of this installation left, the
    installation's surplus egress bridges and its kept egress networks no server needs any
    more. Raises SandboxError without an engine."""
    installation = sandbox_installation()
    return (
        remove_orphans(owner_label_value=owner, installation=installation)
        + remove_surplus_egress_networks(installation=installation)
        + clean_up_stale_egress()
    )


def clean_up_orphans() -> list[str]:
    """What a worker does at start: `sandbox_janitor` for its own owner; [] if no engine."""
    try:
        return sandbox_janitor(owner=sandbox_owner())
    except SandboxError:
        return []


def close_kept_egress() -> None:
    """Remove the proxied networks and proxies this process kept (the worker stops)."""
    EGRESS_POOL.close()


def clean_up_stale_egress(servers: Sequence[str] | None = None) -> list[str]:
    """Remove the kept proxied networks (and proxies) of servers that are retired, deleted, no
    longer proxied or proxied with another allowlist (`servers`: only those slugs)."""
    wanted = {
        slug: egress_policy(allowlist) for slug, allowlist in sandbox_egress_allowlists().items()
    }
    return remove_stale_egress(wanted, installation=sandbox_installation(), servers=servers)


def _launched(argv: Sequence[str]) -> Launcher | None:
    """The package or image a host launcher command (npx, uvx, docker run...) names, if any."""
    try:
        return launcher_parse(list(argv))
    except LauncherError:
        return None


def package_command(argv: Sequence[str], identifier: str) -> tuple[str, list[str]] | None:
    """For a launcher command of the package `identifier`: (the program it names, "" for the
    package's own, and the server's arguments); None when argv does not launch that package.

    A command the launcher parser refuses (a server.json entry's runtime options, say) still
    runs: the arguments are those after the word naming the package.
    """
    launcher = _launched(argv)
    if launcher is not None:
        if launcher.identifier != identifier:
            return None
        return launcher.program, list(launcher.arguments)
    if not is_launcher(list(argv)):
        return None
    for index, word in enumerate(argv[1:], start=1):
        if word == identifier or word.startswith((f"{identifier}@", f"{identifier}==")):
            return "", list(argv[index + 1 :])
    return None


def _program_of(image: ImageRef, identifier: str) -> str | None:
    named = [c for c in image.commands if c.lower() == identifier.rsplit("/", 1)[-1].lower()]
    if named:
        return named[0]
    return image.commands[0] if len(image.commands) == 1 else None


def _resolve(plan: LaunchPlan) -> tuple[ImageRef, list[str]]:
    """The image to run and the command inside it (blocking: builds may take minutes)."""
    engine = connect_engine()
    try:
        if plan.image:
            digest = image_digest(engine, plan.image)
            if digest is None:
                raise McpFailure(
                    "spawn",
                    f"The image {plan.image} is not on the Docker engine and no registry can be "
                    "assumed reachable: build or load it there first.",
                )
            launcher = _launched(plan.argv)
            # `docker run ... IMAGE ARGS`: the image's own entrypoint gets the arguments.
            argv = list(launcher.arguments) if launcher is not None else list(plan.argv)
            return ImageRef(reference=plan.image, digest=digest, commands=(), built=False), argv
        if plan.package_registry in ("pypi", "npm"):
            image = build_package_image(
                plan.package_registry,  # type: ignore[arg-type]
                plan.package_identifier,
                plan.package_version,
                engine=engine,
                lock=plan.package_lock or None,
            )
            launched = package_command(plan.argv, plan.package_identifier)
            if launched is None:
                return image, list(plan.argv)  # the command names the package's program
            named, arguments = launched
            program = named or _program_of(image, plan.package_identifier)
            if program is None:
                if not arguments:
                    return image, []  # the image's own default command
                raise McpFailure(
                    "spawn",
                    f"{plan.package_identifier} installs several programs "
                    f"({', '.join(image.commands)}); set the command to the one to run.",
                )
            return image, [program, *arguments]
        base = NODE_BASE_IMAGE if plan.argv and plan.argv[0] in _NODE_PROGRAMS else BASE_IMAGE
        digest = image_digest(engine, base)
        if digest is None:
            raise McpFailure(
                "spawn",
                f"The sandbox base image {base} is missing: run `python manage.py sandbox "
                "build-base`" + (" --node" if base == NODE_BASE_IMAGE else "") + ".",
            )
        return ImageRef(reference=base, digest=digest, commands=(), built=False), list(plan.argv)
    finally:
        engine.close()


def _record_image(plan: LaunchPlan, image: ImageRef) -> None:
    try:
        server_sandbox_image_record(
            server_id=plan.server_id, reference=image.reference, digest=image.digest
        )
    finally:
        close_old_connections()


def _spec(
    plan: LaunchPlan, image: str, argv: Sequence[str], storage: Sequence[StorageMount] = ()
) -> ContainerSpec:
    return ContainerSpec(
        server_key=plan.slug,
        image=image,
        argv=tuple(argv),
        env=dict(plan.env),
        working_dir=plan.working_directory,
        memory_mb=plan.memory_limit_mb,
        # Docker refuses more CPUs than the engine's host has.
        cpus=min(float(plan.cpu_limit), float(os.cpu_count() or 1)),
        pids_limit=plan.pids_limit,
        network_mode=plan.network_mode,  # type: ignore[arg-type]
        egress_allowlist=tuple(plan.egress_allowlist),
        storage=tuple(storage),
        owner=sandbox_owner(),
        installation=sandbox_installation(),
        runtime_id=f"server-{plan.server_id}",
    )


def _prepare_egress(plan: LaunchPlan) -> None:
    """A proxied server's network and proxy, made (or found kept) while its image is resolved,
    so that its session finds them ready; a failure here is the session's to report."""
    try:
        spec = _spec(plan, BASE_IMAGE, ())
        engine = connect_engine()
    except SandboxError:
        return
    try:
        EGRESS_POOL.prepare(engine, spec, image=lambda: build_proxy_image(engine=engine).reference)
    except Exception as exc:
        logger.warning("The egress proxy of %s could not be prepared: %s", plan.slug, exc)
    finally:
        engine.close()


async def sandbox_target(plan: LaunchPlan, *, isolation_key: str = "") -> TransportTarget:
    """A target whose transport runs the server in a fresh hardened container. `isolation_key`
    (shared, team:<id>, conversation:<team>:<hash>; "" for discovery and health checks) says
    whose storage volumes the session mounts."""
    if plan.network_mode == "proxied":
        # Alongside the image: the session waits for what this has not finished yet.
        threading.Thread(
            target=_prepare_egress, args=(plan,), name=f"egress-{plan.slug}", daemon=True
        ).start()
    try:
        image, argv = await anyio.to_thread.run_sync(functools.partial(_resolve, plan))
    except SandboxError as exc:
        raise McpFailure("spawn", f"The sandbox could not prepare {plan.name}: {exc}") from exc
    await anyio.to_thread.run_sync(functools.partial(_record_image, plan, image))
    try:
        storage, used = await anyio.to_thread.run_sync(
            functools.partial(
                storage_mounts, plan, isolation_key=isolation_key, image=image.reference
            )
        )
    except SandboxError as exc:
        raise McpFailure("spawn", f"The storage of {plan.name} is not ready: {exc}") from exc
    try:
        spec = _spec(plan, image.reference, argv, storage)
    except SandboxSpecError as exc:
        raise McpFailure("spawn", f"The sandbox refuses {plan.name}'s launch spec: {exc}") from exc
    holder: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def with_storage(transport: Any) -> AsyncIterator[Any]:
        try:
            async with transport as streams:
                yield streams
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(storage_after_session, used)

    def open_transport() -> Any:
        transport = sandbox_transport(spec)
        holder["transport"] = transport
        return with_storage(transport) if used else transport

    def stderr_tail() -> str:
        transport = holder.get("transport")
        return "\n".join(transport.stderr_tail()) if transport is not None else ""

    return TransportTarget(
        open_transport=open_transport,
        description=f"{plan.name} in a sandboxed container ({image.reference}, network "
        f"{plan.network_mode})",
        stderr_tail=stderr_tail,
        launched={
            "image": image.reference,
            "digest": image.digest,
            "command": list(argv) or list(image.commands[:1]),  # []: the image's own CMD
            "network": plan.network_mode,
            **({"dependencies": plan.package_lock.get("digest", "")} if plan.package_lock else {}),
            **(
                {"storage": [f"{m.target} ({m.volume or 'scratch tmpfs'})" for m in storage]}
                if storage
                else {}
            ),
            **({"node_version": image.node_version} if image.node_version else {}),
        },
    )
