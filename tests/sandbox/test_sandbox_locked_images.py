"""Sandbox images built from exactly the recorded dependency lock, on the real Docker engine: the
published `mcp-server-sqlite==2025.4.25`, locked as it stood at its release, starts and keeps its
database in its storage; its image holds exactly the locked versions, and building again from the
same lock gives the same image tag and the same set (reproducible)."""

from __future__ import annotations

from typing import Any

import anyio
import docker
import pytest

from registry.servers.dependency_locks import dependencies_resolve
from registry.servers.jobs.launch import server_launch_plan
from registry.servers.models import McpServer
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory
from workers.adapters.mcp_client import Deadlines, connect
from workers.adapters.sandbox import build_package_image
from workers.launch import session_mode, target_for

pytestmark = [pytest.mark.containers, pytest.mark.django_db(transaction=True)]

SQLITE = ("mcp-server-sqlite", "2025.4.25")
DEADLINES = Deadlines(connect=120.0, call=60.0)


def _installed(engine: Any, image: str) -> dict[str, str]:
    """Every distribution in the image's venv and its version."""
    output = engine.containers.run(
        image,
        [
            "/opt/server/bin/python",
            "-c",
            (
                "import importlib.metadata as m\n"
                "for d in m.distributions(): print(d.metadata['Name'].lower(), d.version)"
            ),
        ],
        remove=True,
        network_mode="none",
        user="65534:65534",
    )
    pairs = (line.split(" ", 1) for line in bytes(output).decode().splitlines() if line)
    return {name.replace("_", "-"): version for name, version in pairs}


def test_the_sqlite_server_runs_from_its_locked_tree_and_keeps_its_database(engine):
    lock = dependencies_resolve(registry="pypi", identifier=SQLITE[0], version=SQLITE[1])
    server = McpServerFactory(
        slug="sqlite",
        trust_tier=TrustTier.COMMUNITY,
        isolation="sandbox",
        network_mode="none",
        command=["uvx", f"{SQLITE[0]}=={SQLITE[1]}", "--db-path", "/data/test.db"],
        package_registry="pypi",
        package_identifier=SQLITE[0],
        package_version=SQLITE[1],
        package_lock=lock.as_json(),
        storage=[{"path": "/data", "scope": "server", "size_mb": 16}],
    )
    try:
        image = build_package_image("pypi", *SQLITE, engine=engine, lock=server.package_lock)
        again = build_package_image("pypi", *SQLITE, engine=engine, lock=server.package_lock)

        installed = _installed(engine, image.reference)
        assert again.reference == image.reference  # the same lock, the same image
        for package in lock.packages:
            assert installed[package.name] == package.version, package.name
        assert set(installed) - {p.name for p in lock.packages} <= {"pip"}

        plan = server_launch_plan(server=McpServer.objects.get(pk=server.pk))
        assert plan.handshake_only

        async def run(work: Any) -> Any:
            target = await target_for(plan)
            # As the workers open it: the handshake, its locked SDK (mcp 1.x) knows no other.
            async with connect(target, deadlines=DEADLINES, mode=session_mode(plan)) as connection:
                return await work(connection)

        async def create(connection: Any) -> Any:
            return await connection.call_tool(
                "create_table",
                {"query": "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"},
                timeout=60,
            )

        async def tables(connection: Any) -> Any:
            return await connection.call_tool("list_tables", {}, timeout=60)

        created = anyio.run(run, create)
        listed = anyio.run(run, tables)  # a new container: the database is in the volume

        assert not created.get("isError"), created
        assert "notes" in "".join(b.get("text", "") for b in listed["content"])
    finally:
        client = docker.from_env()
        try:
            for volume in client.volumes.list(filters={"label": "io.toolroom.role=storage"}):
                if volume.name.startswith("toolroom-vol-sqlite-"):
                    volume.remove(force=True)
        finally:
            client.close()
