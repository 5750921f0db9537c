"""Building blocks of the catalogue tests: approved servers with tools, health changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from registry.api.fastbuild import catalogue_build_connections_release
from registry.api.fastpath import CatalogueFastPath
from registry.servers import services as server_services
from registry.servers.models import McpServer, ServerStatus, Tool, UpstreamAuth
from registry.servers.signals import announce_visibility_change, server_visibility_changed
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from tests.factories import (
    CategoryFactory,
    GrantFactory,
    McpServerFactory,
    TeamFactory,
    ToolFactory,
    UserFactory,
    tool_definition,
)

READ = {"readOnlyHint": True}
WRITE: dict[str, Any] = {}
CONNECT = {"openWorldHint": True}


def served_definitions(served: Any) -> dict[str, dict[str, Any]]:
    """name -> definition of the tools an SDK `MCPServer` lists, as discovery stores them."""
    # In a thread of its own: the caller may be running an event loop (Playwright's sync API).
    with ThreadPoolExecutor(1) as pool:
        listed = pool.submit(asyncio.run, served.list_tools()).result()
    return {
        tool.name: dict(tool.model_dump(by_alias=True, exclude_none=True, mode="json"))
        for tool in listed
    }


def approved_server(
    slug: str,
    tools: dict[str, dict[str, Any]] | None = None,
    *,
    category: str | None = None,
    served: Any = None,
) -> McpServer:
    """An approved server whose tools (name -> annotations) are all approved. With `served` (the
    SDK `MCPServer` a test runs for it), each tool is approved at the definition that server
    lists, so the gateway's check when it opens a session finds no rug pull."""
    server = McpServerFactory(
        slug=slug, category=CategoryFactory(slug=category) if category else None
    )
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    listed = served_definitions(served) if served is not None else {}
    for name, hints in (tools or {"read_file": READ}).items():
        definition = listed.get(name) or tool_definition(name, annotations=hints)
        tool = ToolFactory(server=server, name=name, definition=definition)
        server_services.tool_approve(actor="test", tool=tool)
    server.refresh_from_db()
    return server


def per_person_servers() -> dict[str, Any]:
    """Team alpha, its owner carol, and its three granted servers, each with one tool `whoami`:
    `keyed` (each person's secret), `tracker` (each person's OAuth) and `files` (shared)."""
    alpha = TeamFactory(slug="alpha")
    carol = UserFactory(username="carol")
    team_services.team_member_set(actor="test", team=alpha, user=carol, level=MembershipLevel.OWNER)
    servers = {}
    for slug, mode in (
        ("keyed", UpstreamAuth.PERSON_SECRET),
        ("tracker", UpstreamAuth.PERSON_OAUTH),
        ("files", UpstreamAuth.SHARED),
    ):
        servers[slug] = approved_server(slug, {"whoami": READ})
        McpServer.objects.filter(pk=servers[slug].pk).update(upstream_auth=mode)
        servers[slug].refresh_from_db()
        GrantFactory(team=alpha, server=servers[slug])
    return {"team": alpha, "carol": carol, **servers}


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


# The status the stand-in for Django answers with in fast-path tests: "the fast path let it pass".
DJANGO_ANSWERED = 599


async def _django_stub(scope, receive, send):
    await send({"type": "http.response.start", "status": DJANGO_ANSWERED, "headers": []})
    await send({"type": "http.response.body", "body": b"django"})


def fast_path_call(requests):
    """Run (path, query, headers) requests through a fresh ASGI fast path in one event loop;
    (status, headers, body) for each, DJANGO_ANSWERED where it left the request to Django. The
    build threads' connections are closed afterwards (the test database is flushed, and in the
    end dropped, under them)."""

    async def run():
        app = CatalogueFastPath(_django_stub)
        answers = []
        for path, query, headers in requests:
            sent: list[Any] = []

            async def send(message, sent=sent):
                sent.append(message)

            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            scope = {
                "type": "http",
                "method": "GET",
                "path": path,
                "query_string": query.encode(),
                "scheme": "http",
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            }
            await app(scope, receive, send)
            start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
            answers.append(
                (start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body)
            )
        return answers

    try:
        return asyncio.run(run())
    finally:
        catalogue_build_connections_release()
