"""Storage for sandboxed servers as the registry keeps it: the rules an entry follows, whose volume
a session gets, the YAML that says it, the server page that lists, deletes (audited) and pre-fills
volumes, and the review a growing storage needs. (The volumes themselves: test_sandbox_storage.)"""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.core.errors import ApplicationError
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services
from registry.servers.importing.exporting import export_servers
from registry.servers.launch_spec import LaunchSpecError
from registry.servers.models import McpServer, StorageSeed, StorageVolume
from registry.servers.policy import TrustTier
from registry.servers.services.storage import normalise_archive, storage_seed_set
from registry.servers.storage import check_storage, storage_owner_key, storage_volume_name
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db

TEAM_DATA = [{"path": "/data", "scope": "team", "size_mb": 64}]


def _sandboxed(**fields):
    defaults = {
        "trust_tier": TrustTier.COMMUNITY,
        "isolation": "sandbox",
        "storage": TEAM_DATA,
        "command": ["npx", "-y", "@modelcontextprotocol/server-memory@2026.8.31"],
    }
    return McpServerFactory(**{**defaults, **fields})


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"path": "data", "scope": "team", "size_mb": 1}], "must be an absolute path"),
        ([{"path": "/tmp/x", "scope": "team", "size_mb": 1}], "is the container's own"),
        ([{"path": "/../etc", "scope": "team", "size_mb": 1}], "without '..'"),
        ([{"path": "/data", "scope": "galaxy", "size_mb": 1}], "scope 'galaxy' is not one of"),
        ([{"path": "/data", "scope": "team", "size_mb": 0}], "size_mb must be a whole number"),
        ([{"path": "/data", "scope": "person", "size_mb": 1}], "Per-person storage needs"),
        (
            [
                {"path": "/data", "scope": "team", "size_mb": 1},
                {"path": "/data/x", "scope": "team", "size_mb": 1},
            ],
            "overlaps /data",
        ),
        ([{"path": "/data", "size_mb": 1, "owner": "me"}], "give path, scope and size_mb"),
    ],
)
def test_a_bad_storage_entry_is_refused_naming_it(entries, message):
    with pytest.raises(LaunchSpecError, match=message):
        check_storage(entries)


def test_storage_may_not_be_narrower_than_the_sessions():
    with pytest.raises(LaunchSpecError, match="storage per team needs sessions per team"):
        check_storage(TEAM_DATA, isolation_scope="shared")
    assert check_storage(TEAM_DATA, isolation_scope="conversation")  # a conversation has a team


def test_each_session_gets_the_volume_of_whom_it_serves():
    assert storage_owner_key("server", "") == "server"
    assert storage_owner_key("team", "team:7") == "team:7"
    assert storage_owner_key("team", "conversation:7:abc") == "team:7"
    assert storage_owner_key("conversation", "conversation:7:abc") == "conversation:abc"
    assert storage_owner_key("team", "") is None  # discovery, health: a scratch tmpfs
    assert storage_owner_key("conversation", "team:7") is None
    names = {
        storage_volume_name(server_slug="memory", path="/data", owner_key=key)
        for key in ("team:1", "team:2", "server")
    }
    assert len(names) == 3
    assert all(name.startswith("toolroom-vol-memory-") for name in names)


def test_storage_is_for_sandboxed_stdio_servers_only():
    server = _sandboxed(trust_tier=TrustTier.BUILTIN, isolation="local")

    with pytest.raises(ValidationError, match="Storage is for sandboxed stdio servers"):
        server.full_clean()


def test_a_gateway_policy_that_would_share_a_teams_volume_is_refused():
    server = _sandboxed()

    with pytest.raises(ValidationError, match="storage per team needs sessions per team"):
        server_gateway_policy_set(actor="test", server=server, isolation_scope="shared")


def test_more_storage_on_an_approved_server_sends_it_back_to_review():
    server = _sandboxed(review_status="approved")
    bigger = [{"path": "/data", "scope": "team", "size_mb": 128}]

    updated = services.server_update(actor="test", server=server, changes={"storage": bigger})

    assert updated.review_status == "pending_review"


def test_less_storage_on_an_approved_server_needs_no_review():
    server = _sandboxed(review_status="approved")
    smaller = [{"path": "/data", "scope": "team", "size_mb": 32}]

    updated = services.server_update(actor="test", server=server, changes={"storage": smaller})

    assert updated.review_status == "approved"


def test_toolroom_yaml_gives_storage_and_env_not_secret_and_exports_them_back(tmp_path):
    path = tmp_path / "toolroom.yaml"
    path.write_text(
        "mcp_servers:\n"
        "  memory:\n"
        "    transport: stdio\n"
        "    command: [python3, -m, memory]\n"
        "    env: {MEMORY_FILE_PATH: /data/memory.jsonl, TOKEN: s3cr3t-value}\n"
        "    env_not_secret: [MEMORY_FILE_PATH]\n"
        "    sandbox:\n"
        "      storage: [{path: /data, scope: team, size_mb: 64}, {path: /cache, size_mb: 8}]\n"
    )

    call_command("import_servers", str(path), stdout=io.StringIO())

    server = McpServer.objects.get(slug="memory")
    assert server.storage == [
        {"scope": "team", "path": "/data", "size_mb": 64},
        {"scope": "server", "path": "/cache", "size_mb": 8},
    ]
    assert server.env_not_secret == ["MEMORY_FILE_PATH"]
    exported = export_servers(format="yaml")
    assert "MEMORY_FILE_PATH: /data/memory.jsonl" in exported  # not secret: exported
    assert "s3cr3t-value" not in exported
    assert "size_mb: 64" in exported


def _tar(members: dict[str, bytes], *, link: str | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return out.getvalue()


def test_an_archive_becomes_plain_files_owned_by_the_sandboxs_user():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("docs/readme.txt", "hello")

    normalised = normalise_archive(filename="seed.zip", content=out.getvalue(), limit_bytes=1000)

    import gzip

    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(normalised.data))) as tar:
        (member,) = tar.getmembers()
    assert (member.name, member.uid, member.gid, member.mode) == (
        "docs/readme.txt",
        65534,
        65534,
        0o600,
    )
    assert (normalised.files, normalised.size_bytes) == (1, 5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_tar({"../escape.txt": b"x"}), "would be written outside the volume"),
        (_tar({"ok.txt": b"x"}, link="passwd"), "is a link or special file"),
        (_tar({"big.bin": b"x" * 2000}), "more than the storage's"),
        (b"not an archive", "is not a readable"),
    ],
)
def test_a_bad_archive_is_refused_with_the_reason(content, message):
    with pytest.raises(ApplicationError, match=message):
        normalise_archive(filename="seed.tar.gz", content=content, limit_bytes=1024)


def test_the_server_page_lists_volumes_and_deleting_one_is_audited(client, alice):
    server = _sandboxed()
    volume = StorageVolume.objects.create(
        server=server,
        name="toolroom-vol-x-1",
        path="/data",
        scope="team",
        owner_key="team:1",
        owner_label="team alpha",
        size_limit_mb=64,
        used_bytes=3 * 1024 * 1024,
    )
    client.force_login(alice)
    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()

    assert "team alpha" in page
    assert "3.0 MB (5%)" in page

    url = reverse("admin:servers_mcpserver_storage_delete", args=[server.pk, volume.pk])
    refused = client.post(url, {"reason": ""})
    assert refused.status_code == 302
    assert not AuditEvent.objects.filter(action="storage.volume_deleted").exists()

    client.post(url, {"reason": "the team left"})

    volume.refresh_from_db()
    assert volume.delete_requested_at is not None
    event = AuditEvent.objects.get(action="storage.volume_deleted")
    assert (event.actor, event.details["reason"]) == (alice, "the team left")


def test_an_admin_uploads_an_archive_that_pre_fills_new_volumes(client, alice):
    server = _sandboxed()
    client.force_login(alice)

    client.post(
        reverse("admin:servers_mcpserver_storage_seed", args=[server.pk]),
        {"path": "/data", "archive": SimpleUploadedFile("files.tar.gz", _tar({"a.txt": b"hi"}))},
    )

    seed = StorageSeed.objects.get(server=server)
    assert (seed.path, seed.files) == ("/data", 1)
    assert AuditEvent.objects.filter(action="storage.seed_set", server=server).exists()
    with pytest.raises(ApplicationError, match="has no storage at /elsewhere"):
        storage_seed_set(
            actor="test", server=server, path="/elsewhere", filename="x.tar", content=b""
        )


def test_the_demo_memory_and_filesystem_servers_come_with_storage():
    call_command("load_demo", stdout=io.StringIO())

    memory = McpServer.objects.get(slug="memory")
    files = McpServer.objects.get(slug="filesystem")
    assert memory.storage == [{"scope": "team", "path": "/data", "size_mb": 16}]
    assert memory.env["MEMORY_FILE_PATH"].startswith("/data/")
    assert memory.env_not_secret == ["MEMORY_FILE_PATH"]
    assert files.command[-1] == "/data"
    assert files.storage == [{"scope": "team", "path": "/data", "size_mb": 64}]
    assert StorageSeed.objects.get(server=files).files == 2
