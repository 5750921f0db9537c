"""A worker that dies holding a sandbox: the janitor test SIGKILLs it and cleans up after it.

    python -m tests.sandbox_dying_worker OWNER IMAGE

Opens a proxied sandbox running the hostile server in the mode that ignores the end of its stdin,
prints READY once the session is up, then waits to be killed.
"""

from __future__ import annotations

import sys

import anyio
from mcp import Client

from workers.adapters.sandbox import ContainerSpec, sandbox_transport


async def main(owner: str, image: str) -> None:
    spec = ContainerSpec(
        server_key="dying-worker",
        image=image,
        argv=["python3", "/opt/servers/hostile.py"],
        env={"HOSTILE_IGNORE_STDIN_EOF": "1"},
        network_mode="proxied",
        owner=owner,
    )
    async with Client(sandbox_transport(spec)) as client:
        await client.list_tools()
        print("READY", flush=True)
        await anyio.sleep(600)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
