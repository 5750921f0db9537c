"""Building blocks of the catalogue tests: approved servers with tools, health changes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from registry.servers import services as server_services
from registry.servers.models import McpServer, ServerStatus, Tool
from registry.servers.signals import announce_visibility_change, server_visibility_changed
from tests.factories import CategoryFactory, McpServerFactory, ToolFactory, tool_definition

READ = {"readOnlyHint": True}
WRITE: dict[str, Any] = {}
CONNECT = {"openWorldHint": True}


def approved_server(
    slug: str, tools: dict[str, dict[str, Any]] | None = None, *, category: str | None = None
) -> McpServer:
    """An approved server whose tools (name -> annotations) are all approved."""
    server = McpServerFactory(
        slug=slug, category=CategoryFactory(slug=category) if category else None
    )
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for name, hints in (tools or {"read_file": READ}).items():
        tool = ToolFactory(
            server=server, name=name, definition=tool_definition(name, annotations=hints)
        )
        server_services.tool_approve(actor="test", tool=tool)
    server.refresh_from_db()
    return server


def tool_of(server: McpServer, name: str) -> Tool:
    return Tool.objects.get(server=server, name=name)


def set_health(server: McpServer, health: str) -> None:
    """What the workers' health service will do (issue 3): record the health, announce it."""
    ServerStatus.objects.update_or_create(server=server, defaults={"health": health})
    announce_visibility_change(server_ids=[server.pk], reason="server.health_changed")


@contextmanager
def visibility_changes() -> Iterator[list[tuple[list[int], str]]]:
    """What `server_visibility_changed` announces while the block runs: (server ids, reason)."""
    received: list[tuple[list[int], str]] = []

    def receiver(sender: object, server_ids: list[int], reason: str, **kwargs: object) -> None:
        received.append((server_ids, reason))

    server_visibility_changed.connect(receiver)
    try:
        yield received
    finally:
        server_visibility_changed.disconnect(receiver)
