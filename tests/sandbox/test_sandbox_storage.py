"""Storage for sandboxed servers, on the real Docker engine: the published memory server keeps
its graph across restarts in its team's volume (another team's is its own), a conversation's
volume goes when its session ends, server-filesystem finds its files (pre-filled from an archive)
and is discovered, a file cannot outgrow the storage and a volume over its limit comes back
read-only, and deleting a volume is audited then done by the sweep."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import anyio
import docker
import pytest
from django.core.exceptions import ValidationError

from registry.audit.models import AuditEvent
from registry.gateway.services import server_gateway_policy_set
from registry.servers.jobs.launch import server_launch_plan
from registry.servers.models import McpServer, StorageVolume
from registry.servers.policy import TrustTier
from registry.servers.services.storage import storage_seed_set, storage_volume_delete
from registry.servers.storage import storage_volume_name
from tests.factories import McpServerFactory, TeamFactory
from tests.sandbox_images import NPM_SERVER, ensure_node_test_image
from workers.adapters.mcp_client import Deadlines, connect
from workers.adapters.sandbox import build_package_image
from workers.adapters.sandbox.volumes import volume_create
from workers.launch import target_for
from workers.sandbox_storage import storage_volumes_sweep

pytestmark = [pytest.mark.containers, pytest.mark.django_db(transaction=True)]

DEADLINES = Deadlines(connect=120.0, call=60.0)
FILESYSTEM = ("@modelcontextprotocol/server-filesystem", "2026.8.31")


def _sandboxed(**fields: Any) -> McpServer:
    defaults = {
        "trust_tier": TrustTier.COMMUNITY,
        "isolation": "sandbox",
        "network_mode": "none",
        "data_sensitivity": "internal",
    }
    return McpServerFactory(**{**defaults, **fields})


def _memory_server(**fields: Any) -> McpServer:
    name, version = NPM_SERVER
    return _sandboxed(
        slug="memory",
        command=["npx", "-y", f"{name}@{version}"],
        package_registry="npm",
        package_identifier=name,
        package_version=version,
        env={"MEMORY_FILE_PATH": "/data/memory.jsonl"},
        env_not_secret=["MEMORY_FILE_PATH"],
        **fields,
    )


def _session(server: McpServer, isolation_key: str, work: Any) -> Any:
    plan = server_launch_plan(server=McpServer.objects.get(pk=server.pk))

    async def run() -> Any:
        target = await target_for(plan, isolation_key=isolation_key)
        async with connect(target, deadlines=DEADLINES) as connection:
            return await work(connection)

    return anyio.run(run)


def _text(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


def _volumes(server: McpServer) -> list[str]:
    client = docker.from_env()
    try:
        found = client.volumes.list(filters={"label": "io.toolroom.role=storage"})
        return sorted(v.name for v in found if v.name.startswith(f"toolroom-vol-{server.slug}-"))
    finally:
        client.close()


@pytest.fixture
def memory_image(engine):
    return ensure_node_test_image(engine, say=lambda _line: None)


@pytest.fixture
def cleanup():
    servers: list[McpServer] = []
    yield servers.append
    client = docker.from_env()
    try:
        for server in servers:
            for volume in client.volumes.list(filters={"label": "io.toolroom.role=storage"}):
                if volume.name.startswith(f"toolroom-vol-{server.slug}-"):
                    volume.remove(force=True)
    finally:
        client.close()


def test_the_memory_server_keeps_each_teams_graph_across_restarts(memory_image, cleanup):
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    server = _memory_server(storage=[{"path": "/data", "scope": "team", "size_mb": 16}])
    cleanup(server)
    entity = {"name": "toolroom", "entityType": "service", "observations": ["owned by ops"]}

    async def remember(connection: Any) -> dict[str, Any]:
        result: dict[str, Any] = await connection.call_tool(
            "create_entities", {"entities": [entity]}, timeout=60
        )
        return result

    async def recall(connection: Any) -> str:
        return _text(await connection.call_tool("read_graph", {}, timeout=60))

    written = _session(server, f"team:{alpha.pk}", remember)
    again = _session(server, f"team:{alpha.pk}", recall)  # a new container: a restart
    other = _session(server, f"team:{beta.pk}", recall)
    discovery = _session(server, "", recall)  # no team: a scratch tmpfs

    assert not written.get("isError"), written
    assert "owned by ops" in again
    assert "owned by ops" not in other
    assert "owned by ops" not in discovery
    volumes = StorageVolume.objects.filter(server=server).order_by("owner_key")
    assert [(v.owner_key, v.owner_label) for v in volumes] == [
        (f"team:{alpha.pk}", "team alpha"),
        (f"team:{beta.pk}", "team beta"),
    ]
    assert len(_volumes(server)) == 2
    assert (volumes[0].used_bytes or 0) > 0  # measured by the engine


def test_a_conversations_volume_goes_when_its_session_ends(memory_image, cleanup):
    team = TeamFactory(slug="alpha")
    server = _memory_server(storage=[{"path": "/data", "scope": "conversation", "size_mb": 16}])
    server_gateway_policy_set(actor="test", server=server, isolation_scope="conversation")
    cleanup(server)

    async def remember(connection: Any) -> None:
        await connection.call_tool(
            "create_entities",
            {"entities": [{"name": "x", "entityType": "t", "observations": ["y"]}]},
            timeout=60,
        )
        assert len(_volumes(server)) == 1  # while the conversation's session is open

    _session(server, f"conversation:{team.pk}:{'a' * 24}", remember)

    assert _volumes(server) == []
    assert not StorageVolume.objects.filter(server=server).exists()
    event = AuditEvent.objects.get(action="storage.volume_removed")
    assert "its conversation's session ended" in event.summary


def test_storage_narrower_than_the_sessions_is_refused():
    server = _memory_server(storage=[{"path": "/data", "scope": "conversation", "size_mb": 16}])

    with pytest.raises(ValidationError, match="storage per conversation needs sessions per"):
        server.full_clean()


def _seed(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_server_filesystem_finds_the_files_an_admin_uploaded_and_is_discovered(engine, cleanup):
    name, version = FILESYSTEM
    build_package_image("npm", name, version, engine=engine, say=lambda _line: None)
    server = _sandboxed(
        slug="files",
        command=["npx", "-y", f"{name}@{version}", "/data"],
        package_registry="npm",
        package_identifier=name,
        package_version=version,
        storage=[{"path": "/data", "scope": "server", "size_mb": 8}],
    )
    cleanup(server)
    storage_seed_set(
        actor="test",
        server=server,
        path="/data",
        filename="files.tar.gz",
        content=_seed({"welcome.txt": b"hello from the archive\n", "notes/a.txt": b"a\n"}),
    )

    async def read_and_write(connection: Any) -> tuple[int, str, str]:
        listed = await connection.list_tools()
        read = await connection.call_tool(
            "read_text_file", {"path": "/data/welcome.txt"}, timeout=60
        )
        written = await connection.call_tool(
            "write_file", {"path": "/data/new.txt", "content": "kept"}, timeout=60
        )
        return len(listed), _text(read), _text(written)

    async def read_new(connection: Any) -> str:
        return _text(
            await connection.call_tool("read_text_file", {"path": "/data/new.txt"}, timeout=60)
        )

    tools, welcome, written = _session(server, "", read_and_write)  # as discovery opens it

    assert tools > 5
    assert welcome == "hello from the archive\n"
    assert "Successfully wrote" in written
    assert _session(server, "team:1", read_new) == "kept"  # per server: every session's


def test_a_file_cannot_outgrow_the_storage_and_a_full_volume_comes_back_read_only(images, cleanup):
    server = _sandboxed(
        slug="filler",
        image=images.servers.reference,
        command=["python", "/opt/servers/hostile.py"],
        trust_tier=TrustTier.UNTRUSTED,
        storage=[{"path": "/data", "scope": "server", "size_mb": 2}],
    )
    cleanup(server)

    async def fill(connection: Any) -> list[str]:
        big = await connection.call_tool("fill", {"path": "/data/big", "megabytes": 5}, timeout=60)
        more = await connection.call_tool(
            "fill", {"path": "/data/more", "megabytes": 1}, timeout=60
        )
        return [_text(big), _text(more)]

    async def fill_again(connection: Any) -> list[str]:
        again = await connection.call_tool("fill", {"path": "/data/c", "megabytes": 1}, timeout=60)
        listing = await connection.call_tool("listing", {"path": "/data"}, timeout=60)
        return [_text(again), _text(listing)]

    big, more = _session(server, "", fill)

    assert big == "2 MiB, then OSError: [Errno 27] File too large"  # RLIMIT_FSIZE: the kernel
    assert more == "1 MiB"  # several files can still pass the size together...
    volume = StorageVolume.objects.get(server=server)
    assert volume.used_bytes is not None
    assert volume.used_bytes >= 3 * 1024 * 1024
    assert volume.over_limit  # ...which the engine's measure catches after the session

    refused, listing = _session(server, "", fill_again)

    assert refused == "0 MiB, then OSError: [Errno 30] Read-only file system: '/data/c'"
    assert "big 2097152" in listing  # still readable


def test_deleting_a_volume_is_audited_and_the_sweep_removes_it(images, cleanup, alice):
    server = _sandboxed(
        slug="deleted",
        image=images.servers.reference,
        command=["python", "/opt/servers/hostile.py"],
        trust_tier=TrustTier.UNTRUSTED,
        storage=[{"path": "/data", "scope": "server", "size_mb": 2}],
    )
    cleanup(server)

    async def write(connection: Any) -> None:
        await connection.call_tool("fill", {"path": "/data/x", "megabytes": 1}, timeout=60)

    _session(server, "", write)
    volume = StorageVolume.objects.get(server=server)

    storage_volume_delete(actor=alice, volume=volume, reason="the team left")
    swept = storage_volumes_sweep()

    assert swept["removed"] >= 1
    assert _volumes(server) == []
    assert not StorageVolume.objects.filter(server=server).exists()
    event = AuditEvent.objects.get(action="storage.volume_deleted")
    assert event.actor == alice
    assert event.details["reason"] == "the team left"
    assert json.dumps(event.details)  # what was deleted, kept after the row is gone


def test_the_sweep_leaves_another_installations_volumes_alone(images, cleanup, settings):
    """Two Toolrooms on one engine: a volume of installation B (the same server slug, no row in
    A's database) is not A's to measure or remove; A's own orphan volume is."""
    server = _sandboxed(
        slug="shared-slug",
        image=images.servers.reference,
        command=["python", "/opt/servers/hostile.py"],
        trust_tier=TrustTier.UNTRUSTED,
        storage=[{"path": "/data", "scope": "server", "size_mb": 2}],
    )
    cleanup(server)
    engine = docker.from_env()
    ours = settings.TOOLROOM_INSTALLATION
    names = {}
    try:
        for installation in ("other-installation", ours):
            settings.TOOLROOM_INSTALLATION = installation
            names[installation] = storage_volume_name(
                server_slug=server.slug, path="/data", owner_key="server"
            )
            volume_create(
                engine,
                name=names[installation],
                image=images.servers.reference,
                target="/data",
                installation=installation,
                labels={},
            )
        theirs, mine = names["other-installation"], names[ours]
        assert theirs != mine  # one slug, one path, two installations: two volumes

        swept = storage_volumes_sweep()  # A has no row for either: both look orphaned to it

        assert swept["removed"] == 1
        remaining = {volume.name for volume in engine.volumes.list()}
        assert theirs in remaining
        assert mine not in remaining
    finally:
        settings.TOOLROOM_INSTALLATION = ours
        engine.close()
