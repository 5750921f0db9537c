"""What Toolroom sends a remote MCP server to learn whether it signs each person in, and how it
reads the answer: an `initialize` without a credential of Toolroom's, and the 401's RFC 9728
`resource_metadata`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

HTTP_UNAUTHORIZED = 401
# Quoted as the specification writes it, or bare as some servers send it.
RESOURCE_METADATA = re.compile(r'resource_metadata="?([^",\s]+)"?')


def unauthenticated_initialize(client_name: str) -> dict[str, Any]:
    """The handshake's `initialize`, from `client_name` (which part of Toolroom asks)."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": client_name, "version": "1"},
        },
    }


def resource_metadata_url(headers: Mapping[str, str]) -> str:
    """The protected resource metadata URL a 401's `WWW-Authenticate` names, or ''."""
    found = RESOURCE_METADATA.search(headers.get("www-authenticate", ""))
    return found.group(1) if found else ""
