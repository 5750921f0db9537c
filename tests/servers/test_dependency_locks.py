"""Package servers pinned all the way down: at import the whole dependency tree is resolved with
exact versions and hashes (uv for PyPI, npm's lockfile), as it stood when the pinned version was
released; shown in the plan and on the server page, audited, moved only through review. The
published `mcp-server-sqlite==2025.4.25` is the case: it asks for `mcp>=1.6.0`, and the newest
`mcp` crashes it. (The image built from the lock: test_sandbox_locked_images.)

These ask PyPI and the npm registry (uv and npm run as subprocesses)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers.dependency_locks import dependencies_resolve
from registry.servers.models import McpServer

pytestmark = [pytest.mark.django_db, pytest.mark.processes]

SQLITE = ("mcp-server-sqlite", "2025.4.25")
MEMORY = ("@modelcontextprotocol/server-memory", "2026.8.31")


@pytest.fixture
def locking(settings):
    settings.TOOLROOM_IMPORT_LOCK_DEPENDENCIES = True


def _versions(lock) -> dict[str, str]:
    return {p.name: p.version for p in lock.packages}


def test_the_sqlite_servers_tree_is_resolved_as_it_stood_at_its_release():
    lock = dependencies_resolve(registry="pypi", identifier=SQLITE[0], version=SQLITE[1])

    versions = _versions(lock)
    assert versions["mcp-server-sqlite"] == "2025.4.25"
    assert versions["mcp"].startswith("1.")  # not the newest mcp, which crashes it
    assert lock.as_of.startswith("2025-04-26")
    assert all(p.hashes and p.hashes[0].startswith("sha256:") for p in lock.packages)
    assert lock.resolver.startswith("uv ")
    assert f"mcp=={versions['mcp']}" in lock.lockfile


def test_an_npm_servers_tree_is_its_package_lock_with_integrity_hashes():
    lock = dependencies_resolve(registry="npm", identifier=MEMORY[0], version=MEMORY[1])

    versions = _versions(lock)
    assert versions[MEMORY[0]] == MEMORY[1]
    assert "@modelcontextprotocol/sdk" in versions
    assert all(p.hashes and p.hashes[0].startswith("sha512-") for p in lock.packages)
    assert json.loads(lock.lockfile)["lockfileVersion"] == 3


def _import(tmp_path, *args: str) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "sqlite": {
                        "command": "uvx",
                        "args": [f"{SQLITE[0]}=={SQLITE[1]}", "--db-path", "/data/test.db"],
                    }
                }
            }
        )
    )
    out = io.StringIO()
    call_command("import_servers", str(path), *args, stdout=out)
    return out.getvalue()


def test_the_import_plan_shows_the_locked_tree_and_the_import_records_and_audits_it(
    locking, tmp_path
):
    plan = _import(tmp_path, "--dry-run")

    assert "package_lock: 2" in plan
    assert "packages as of 2025-04-26" in plan
    assert not McpServer.objects.exists()

    _import(tmp_path)

    server = McpServer.objects.get(slug="sqlite")
    lock = server.package_lock
    assert (lock["registry"], lock["identifier"], lock["version"]) == ("pypi", *SQLITE)
    assert {p["name"] for p in lock["packages"]} >= {"mcp", "mcp-server-sqlite", "pydantic"}
    event = AuditEvent.objects.get(action="server.dependencies_locked", server=server)
    assert event.details["digest"] == lock["digest"]
    assert {p["name"] for p in event.details["packages"]} == {p["name"] for p in lock["packages"]}

    again = _import(tmp_path)  # the lock still fits the package: kept, nothing changes

    assert "0 updated, 1 unchanged" in again
    assert McpServer.objects.get(slug="sqlite").package_lock["digest"] == lock["digest"]


def test_a_new_lock_sends_an_approved_server_back_to_review(locking, tmp_path):
    _import(tmp_path)
    McpServer.objects.filter(slug="sqlite").update(review_status="approved")
    out = io.StringIO()

    call_command("lock_dependencies", "sqlite", "--as-of", "2025-09-01", stdout=out)

    server = McpServer.objects.get(slug="sqlite")
    assert server.review_status == "pending_review"
    assert server.package_lock["as_of"].startswith("2025-09-01")
    assert "back to review" in out.getvalue()
    event = AuditEvent.objects.filter(action="server.dependencies_locked").latest("pk")
    assert any(move.startswith("mcp ") for move in event.details["moved"])


def test_the_server_page_lists_the_locked_set(locking, tmp_path, client, alice):
    _import(tmp_path)
    server = McpServer.objects.get(slug="sqlite")
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()

    mcp = next(p for p in server.package_lock["packages"] if p["name"] == "mcp")
    assert "locked: " in page
    assert f"<code>mcp {mcp['version']}</code>" in page
    assert mcp["hashes"][0][:20] in page


def test_a_lock_of_another_package_is_refused(locking, tmp_path):
    _import(tmp_path)
    server = McpServer.objects.get(slug="sqlite")
    server.package_version = "2025.1.14"

    with pytest.raises(ValidationError, match="The dependency lock is for mcp-server-sqlite"):
        server.full_clean()
