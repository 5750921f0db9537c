"""The images the sandbox tests and benchmark need, built when missing and reused after that.

Run it to build them ahead of the tests (scripts/ensure-sandbox-image does):
    python -m tests.sandbox_images

The npm server's image needs the Node.js base (another debootstrap, about a minute) and the npm
registry; it is built only for the one test that runs it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from workers.adapters.sandbox import (
    NODE_BASE_IMAGE,
    ImageRef,
    build_base_image,
    build_package_image,
    build_proxy_image,
    build_python_image,
    connect_engine,
)
from workers.adapters.sandbox.engine import Engine

SERVERS = Path(__file__).parent / "sandbox_servers"
TEST_REPOSITORY = "toolroom/sandbox-test"


@dataclass(frozen=True)
class SandboxTestImages:
    base: ImageRef
    proxy: ImageRef
    servers: ImageRef  # the SDK servers of tests/sandbox_servers, hostile and honest
    time_server: ImageRef  # the published mcp-server-time from PyPI


def ensure_test_images(engine: Engine | None = None, *, say=print) -> SandboxTestImages:
    engine = engine or connect_engine()
    base = build_base_image(engine=engine, say=say)
    proxy = build_proxy_image(engine=engine, say=say)
    servers = build_python_image(
        repository=TEST_REPOSITORY,
        requirements=[f"mcp=={version('mcp')}"],
        files={f"/opt/servers/{path.name}": path.read_bytes() for path in SERVERS.glob("*.py")},
        # Planted for the hostile server: setuid-root programs that no-new-privileges must defuse.
        root_commands=[
            ["cp", "/usr/bin/cat", "/usr/local/bin/suid-cat"],
            ["chmod", "4755", "/usr/local/bin/suid-cat"],
            ["cp", "/usr/bin/python3.11", "/usr/local/bin/suid-python"],
            ["chmod", "4755", "/usr/local/bin/suid-python"],
        ],
        engine=engine,
        say=say,
    )
    time_server = build_package_image(
        "pypi", "mcp-server-time", version("mcp-server-time"), engine=engine, say=say
    )
    return SandboxTestImages(base=base, proxy=proxy, servers=servers, time_server=time_server)


# A reference server on the TypeScript SDK, pinned: the npm path of the sandbox.
NPM_SERVER = ("@modelcontextprotocol/server-memory", "2026.8.31")


def ensure_node_test_image(engine: Engine | None = None, *, say=print) -> ImageRef:
    """The Node.js base (built when missing) and the npm server's package image."""
    engine = engine or connect_engine()
    build_base_image(engine=engine, reference=NODE_BASE_IMAGE, node=True, say=say)
    return build_package_image("npm", *NPM_SERVER, engine=engine, say=say)


if __name__ == "__main__":
    images = ensure_test_images()
    for name, ref in vars(images).items():
        print(f"{name}: {ref.reference} {ref.digest[:19]}")
    node = ensure_node_test_image()
    print(f"npm server: {node.reference} {node.digest[:19]}")
    sys.exit(0)
