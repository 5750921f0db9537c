"""Secret masking of what the gateway says about a failed call: the server's secrets (env and
header values, its URL) in an upstream error reach the agent masked.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

from typing import Any

from registry.gateway.port import (
    VersionedCache,
    secret_redact,
    secret_redact_in,
    server_secrets,
)
from workers.gateway.registry_calls import in_thread

SECRETS_TTL_SECONDS = 30.0
_MAX_SERVERS = 4096


class SecretMask:
    """The servers' secrets of one gateway process, for masking error text."""

    def __init__(self) -> None:
        self._secrets: VersionedCache[int, list[str]] = VersionedCache(
            "servers' secrets", limit=_MAX_SERVERS
        )

    async def secrets(self, server_id: int, version: int | None) -> list[str]:
        kept = self._secrets.get(server_id, version)
        if kept is not None:
            return kept
        values = await in_thread(server_secrets, server_id=server_id)
        return self._secrets.put(server_id, values, version, ttl=SECRETS_TTL_SECONDS)

    async def text(self, server_id: int, version: int | None, text: str) -> str:
        return secret_redact(text, await self.secrets(server_id, version))

    async def result(self, server_id: int, version: int | None, result: dict[str, Any]) -> Any:
        """An error result with every string in it masked."""
        return secret_redact_in(result, await self.secrets(server_id, version))
