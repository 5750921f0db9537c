"""From a server's launch plan to something the MCP adapter can open.

Local stdio processes are wrapped so they cannot outlive the worker that started them: the
kernel kills them when the worker dies (`setpriv --pdeathsig KILL`, from util-linux), and each
carries TOOLROOM_PROCESS_OWNER in its environment so the janitor can find what a killed worker
left behind. A server whose policy says it must be sandboxed runs only in a container
(workers/sandboxing.py), never as a local process.
"""

from __future__ import annotations

import os
import shutil
import socket
from functools import cache

from django.conf import settings

from registry.servers.jobs.launch import LaunchPlan
from workers.adapters.mcp_client import (
    Deadlines,
    HttpTarget,
    McpFailure,
    StdioTarget,
    Target,
    mode_for,
)
from workers.sandboxing import sandbox_target

OWNER_ENV = "TOOLROOM_PROCESS_OWNER"
# The installation the server process belongs to: a janitor kills only its own installation's.
INSTALLATION_ENV = "TOOLROOM_PROCESS_INSTALLATION"


@cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def process_owner_tag() -> str:
    """Identifies this worker process in the environment of every server it starts."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def target_for(plan: LaunchPlan, *, isolation_key: str = "") -> Target:
    """How to reach the server: its URL, a sandboxed container, or a local process.
    `isolation_key`: whom the session serves (its storage, docs/sandbox.md)."""
    if plan.transport in ("streamable_http", "sse"):
        headers = dict(plan.headers)
        if plan.upstream_token:  # a per-person server, discovered with an admin's account
            headers["Authorization"] = f"Bearer {plan.upstream_token}"
        return HttpTarget(
            url=plan.url,
            transport="sse" if plan.transport == "sse" else "streamable_http",
            headers=headers,
            allowed_networks=plan.allowed_networks,
            label=plan.name or plan.slug,
        )
    if plan.sandboxed:
        return await sandbox_target(plan, isolation_key=isolation_key)
    argv = list(plan.argv)
    if not argv:
        raise McpFailure("spawn", f"{plan.name} has no command to run.")
    program = _resolve_program(argv[0], plan)
    label = " ".join(argv[:3]) + (" ..." if len(argv) > 3 else "")
    setpriv = _setpriv()
    argv = [setpriv, "--pdeathsig", "KILL", "--", program, *argv[1:]] if setpriv else argv
    return StdioTarget(
        argv=argv,
        env={
            **plan.env,
            OWNER_ENV: process_owner_tag(),
            INSTALLATION_ENV: settings.TOOLROOM_INSTALLATION,
        },
        cwd=plan.working_directory or None,
        label=label,
    )


def _resolve_program(program: str, plan: LaunchPlan) -> str:
    """The program's path, found the way the process would find it; a clear error if missing."""
    if "/" in program:
        base = plan.working_directory or os.getcwd()
        path = os.path.join(base, program)
        if not os.path.isfile(path):
            raise McpFailure("spawn", f"The command was not found: {program}.")
        if not os.access(path, os.X_OK):
            raise McpFailure("spawn", f"The command is not executable: {program}.")
        return program
    search_path = plan.env.get("PATH") or os.environ.get("PATH", os.defpath)
    found = shutil.which(program, path=search_path)
    if found is None:
        raise McpFailure(
            "spawn", f"The command was not found: {program} (searched the PATH {search_path})."
        )
    return found


def session_mode(plan: LaunchPlan) -> str:
    """How to open a session to the server: what it last negotiated, and the handshake for a
    server whose lock says its SDK speaks nothing else (before any discovery too)."""
    mode = mode_for(plan.protocol_version)
    return "legacy" if plan.handshake_only and mode == "auto" else mode


def health_deadlines(plan: LaunchPlan) -> Deadlines:
    timeout = float(plan.health_check_timeout_seconds)
    return Deadlines(connect=timeout, call=timeout)


def discovery_deadlines(plan: LaunchPlan) -> Deadlines:
    timeout = float(plan.discovery_timeout_seconds)
    return Deadlines(connect=timeout, call=timeout)
