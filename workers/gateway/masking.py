"""Secret masking of what the gateway says about a failed call: an upstream error (or a tool's own
error result) that echoes one of the server's secrets (its env values, its headers' values, e.g.
the API key the gateway sent it) reaches the agent with the secret replaced by the mask, through
the project's `secret_redact`, as in discovery reports, health errors and stderr tails.

Successful results are passed as they are. The secrets are read from the database only when an
error needs masking, and kept per server for the catalogue version they were read at (and at
most `SECRETS_TTL_SECONDS`), so a warm successful call still makes no query.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from django.db import close_old_connections

from registry.core.secret_fields import secret_redact, secret_redact_in
from registry.servers.models import McpServer

SECRETS_TTL_SECONDS = 30.0
_MAX_SERVERS = 4096


def _server_secrets(server_id: int) -> list[str]:
    try:
        server = McpServer.objects.only("env", "headers").filter(pk=server_id).first()
        return server.secret_values() if server is not None else []
    finally:
        close_old_connections()


class SecretMask:
    """The servers' secrets of one gateway process, for masking error text."""

    def __init__(self) -> None:
        self._secrets: dict[int, tuple[int | None, float, list[str]]] = {}

    async def secrets(self, server_id: int, version: int | None) -> list[str]:
        kept = self._secrets.get(server_id)
        now = time.monotonic()
        if kept is not None and kept[0] == version and now - kept[1] < SECRETS_TTL_SECONDS:
            return kept[2]
        values = await anyio.to_thread.run_sync(_server_secrets, server_id)
        if len(self._secrets) >= _MAX_SERVERS:
            self._secrets.clear()
        self._secrets[server_id] = (version, now, values)
        return values

    async def text(self, server_id: int, version: int | None, text: str) -> str:
        return secret_redact(text, await self.secrets(server_id, version))

    async def result(self, server_id: int, version: int | None, result: dict[str, Any]) -> Any:
        """An error result with every string in it masked."""
        return secret_redact_in(result, await self.secrets(server_id, version))
