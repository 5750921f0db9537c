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

from registry.servers.operations.launch import LaunchPlan
from workers.adapters.mcp_client import Deadlines, HttpTarget, McpFailure, StdioTarget, Target
from workers.sandboxing import sandbox_target

OWNER_ENV = "TOOLROOM_PROCESS_OWNER"


@cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def process_owner_tag() -> str:
    """Identifies this worker process in the environment of every server it starts."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def target_for(plan: LaunchPlan) -> Target:
    """How to reach the server: its URL, a sandboxed container, or a local process."""
    if plan.transport in ("streamable_http", "sse"):
        return HttpTarget(
            url=plan.url,
            transport="sse" if plan.transport == "sse" else "streamable_http",
            headers=plan.headers,
            allowed_networks=plan.allowed_networks,
        )
    if plan.sandboxed:
        return await sandbox_target(plan)
    argv = list(plan.argv)
    if not argv:
        raise McpFailure("spawn", f"{plan.name} has no command to run.")
    program = _resolve_program(argv[0], plan)
    label = " ".join(argv[:3]) + (" ..." if len(argv) > 3 else "")
    setpriv = _setpriv()
    argv = [setpriv, "--pdeathsig", "KILL", "--", program, *argv[1:]] if setpriv else argv
    return StdioTarget(
        argv=argv,
        env={**plan.env, OWNER_ENV: process_owner_tag()},
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


def health_deadlines(plan: LaunchPlan) -> Deadlines:
    timeout = float(plan.health_check_timeout_seconds)
    return Deadlines(connect=timeout, call=timeout)


def discovery_deadlines(plan: LaunchPlan) -> Deadlines:
    timeout = float(plan.discovery_timeout_seconds)
    return Deadlines(connect=timeout, call=timeout)
