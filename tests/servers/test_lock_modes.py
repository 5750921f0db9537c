"""A server whose dependency lock pins the Python SDK before 2.0 is opened with the handshake:
such servers crash on the 2026-07-28 probe (mcp-server-sqlite 2025.4.25 on mcp 1.6.0 exits with
code 1 on `server/discover`; tests/sandbox/test_sandbox_locked_images.py runs it)."""

from __future__ import annotations

import pytest

from registry.servers.dependency_locks import lock_speaks_handshake_only
from registry.servers.jobs.launch import server_launch_plan
from tests.factories import McpServerFactory
from workers.launch import session_mode

pytestmark = pytest.mark.django_db


def _lock(mcp_version: str, registry: str = "pypi") -> dict[str, object]:
    return {
        "registry": registry,
        "identifier": "mcp-server-sqlite",
        "version": "2025.4.25",
        "packages": [
            {"name": "mcp", "version": mcp_version, "hashes": []},
            {"name": "mcp-server-sqlite", "version": "2025.4.25", "hashes": []},
        ],
    }


def test_a_lock_on_the_sdk_before_2_speaks_the_handshake_only():
    assert lock_speaks_handshake_only(_lock("1.6.0"))
    assert not lock_speaks_handshake_only(_lock("2.3.0"))
    assert not lock_speaks_handshake_only({})
    assert not lock_speaks_handshake_only(_lock("1.6.0", registry="npm"))


def test_such_a_server_is_opened_with_the_handshake_until_it_negotiated_one():
    server = McpServerFactory(
        package_registry="pypi",
        package_identifier="mcp-server-sqlite",
        package_version="2025.4.25",
        package_lock=_lock("1.6.0"),
    )

    plan = server_launch_plan(server=server)

    assert plan.handshake_only
    assert session_mode(plan) == "legacy"


def test_other_servers_negotiate_as_before():
    plan = server_launch_plan(server=McpServerFactory())

    assert not plan.handshake_only
    assert session_mode(plan) == "auto"
