"""Will a sandboxed server's command run in its image? Said at import and in the admin, before
a discovery fails with "exec ... failed: No such file or directory".

More: docs/sandbox.md, "Module notes"."""

from __future__ import annotations

import re

from registry.servers.importing.launchers import LauncherError, is_launcher, launcher_parse
from registry.servers.models import McpServer, Transport
from registry.servers.policy import Isolation, tier_policy

# What the base images have on PATH (workers.adapters.sandbox.images builds them: debootstrap
# minbase with python3; the Node base has Node.js instead).
BASE_IMAGE_PROGRAMS = frozenset({"python3", "python3.11", "sh", "bash", "env", "cat", "true"})
NODE_IMAGE_PROGRAMS = BASE_IMAGE_PROGRAMS | {"node"}
_SCRIPT = re.compile(r"\.(py|js|mjs|cjs|ts|sh)$")
_IMAGE_PATHS = ("/opt/", "/usr/")
# The way out for a program that lives on this host and that its operators trust.
HOST_PROGRAM_FIX = (
    " If it is a program installed on this host that you trust, import the file again with "
    "`--tier builtin` (the admin's import page: tier Builtin), or set the server's tier to "
    "builtin and its isolation to local: builtin servers run as local processes."
)


def _is_host_path(word: str) -> bool:
    return (
        word.startswith(("/", "~", "./", "../", "\\\\"))
        or bool(re.match(r"^[A-Za-z]:[\\/]", word))
        or "\\" in word
    )


def sandbox_launch_warnings(
    *,
    transport: str,
    isolation: str,
    command: list[str] | None,
    package_registry: str,
    image: str,
) -> list[str]:
    """Why this launch spec would fail in the sandbox, in words for an admin; [] if it looks
    runnable (or is not sandboxed)."""
    if transport != Transport.STDIO or isolation != Isolation.SANDBOX or not command:
        return []
    program = command[0]
    if package_registry in ("pypi", "npm"):
        return []  # the image is built from the package; its command is checked at build
    if image:
        if _is_host_path(program) and not program.startswith(_IMAGE_PATHS):
            message = (
                f"The command starts with {program!r}, a path on the host; in the sandbox it runs "
                f"inside the image {image}, which has to hold that program."
            )
            return [message]
        return []
    if is_launcher(command):
        try:
            launcher = launcher_parse(command)
        except LauncherError as exc:
            message = (
                f"`{program}` cannot run in the sandbox, and the command cannot be read as a "
                f"package: {exc}"
            )
            return [message]
        what = launcher.describe() if launcher is not None else "its package"
        message = (
            f"`{program}` would download {what} when it starts, which the sandbox (no network, "
            "no runner in its image) cannot do. Store it as a package or image reference: "
            "`python manage.py adopt_launchers` (or import the entry again)."
        )
        return [message]
    warnings: list[str] = []
    if _is_host_path(program):
        warnings.append(
            f"The program {program!r} is a path on this host; the sandbox runs the server in a "
            "base image that does not have it. Give the server a package or an image reference."
            + HOST_PROGRAM_FIX
        )
    elif program not in NODE_IMAGE_PROGRAMS:
        warnings.append(
            f"`{program}` is not in the sandbox's base images (they hold python3 and, for "
            "node/npm/npx, Node.js). Give the server a package or an image reference."
            + HOST_PROGRAM_FIX
        )
    scripts = [arg for arg in command[1:] if _is_host_path(arg) and _SCRIPT.search(arg)]
    scripts = [arg for arg in scripts if not arg.startswith(_IMAGE_PATHS)]
    if scripts:
        warnings.append(
            f"{', '.join(repr(s) for s in scripts)} "
            f"{'is a file' if len(scripts) == 1 else 'are files'} on this host; the sandbox's "
            "image does not have it. Package the server or build an image that holds it."
            + ("" if warnings else HOST_PROGRAM_FIX)
        )
    return warnings


def server_sandbox_launch_warnings(server: McpServer) -> list[str]:
    return sandbox_launch_warnings(
        transport=server.transport,
        isolation=server.isolation or tier_policy(server.trust_tier).default_isolation,
        command=list(server.command or []),
        package_registry=server.package_registry,
        image=server.image,
    )


def server_ids_with_sandbox_launch_warnings() -> set[int]:
    """The ids of servers whose sandbox launch would fail (for the admin's list filter)."""
    rows = McpServer.objects.filter(transport=Transport.STDIO).values(
        "pk", "transport", "isolation", "trust_tier", "command", "package_registry", "image"
    )
    found: set[int] = set()
    for row in rows:
        isolation = row["isolation"] or tier_policy(row["trust_tier"]).default_isolation
        if sandbox_launch_warnings(
            transport=row["transport"],
            isolation=isolation,
            command=list(row["command"] or []),
            package_registry=row["package_registry"],
            image=row["image"],
        ):
            found.add(row["pk"])
    return found
