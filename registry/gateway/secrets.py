"""What the gateway masks in a server's error text: its secret values (env and header values)
and the parts of its URL that can carry a token; agents are told the server's name instead."""

from __future__ import annotations

from urllib.parse import urlsplit

from registry.servers.models import McpServer


def url_secrets(url: str) -> list[str]:
    """The parts of a server's URL that error text must not show: the URL itself and its path
    and query, which can carry a token (`https://host/<token>/mcp`). Agents are told the
    server's name instead (every gateway error starts with it)."""
    if not url:
        return []
    parts = urlsplit(url)
    path_and_query = parts.path + (f"?{parts.query}" if parts.query else "")
    return [url, url.rstrip("/"), f"{parts.netloc}{path_and_query}", path_and_query, parts.query]


def server_secrets(*, server_id: int) -> list[str]:
    """Everything to mask in the server's error text (one query)."""
    server = (
        McpServer.objects.only("env", "headers", "env_not_secret", "url")
        .filter(pk=server_id)
        .first()
    )
    if server is None:
        return []
    return [*url_secrets(server.url), *server.secret_values()]
