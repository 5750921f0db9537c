"""What the MCP client connects to (stdio, HTTP or a transport), its deadlines, McpFailure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp.client._transport import Transport

FailureKind = Literal[
    "spawn",  # the command could not be started
    "connect",  # the server could not be reached or refused the connection
    "refused",  # the network guard refused the address
    "timeout",  # no answer within our deadline
    "closed",  # the server went away (process exited, connection dropped)
    "protocol",  # the server answered with an MCP error or something that is not MCP
]


class McpFailure(Exception):
    """Talking to an MCP server failed; `message` says how, for an admin."""

    def __init__(
        self, kind: FailureKind, message: str, *, stderr_tail: str = "", code: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.stderr_tail = stderr_tail
        self.code = code  # the MCP error code, when the server answered with one

    def __str__(self) -> str:
        return self.message

    def describe(self) -> str:
        """The message with the server's last stderr lines, for the admin's "last error"."""
        if not self.stderr_tail:
            return self.message
        return f"{self.message}\n--- server stderr (last lines) ---\n{self.stderr_tail}"


@dataclass(frozen=True)
class StdioTarget:
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    # How to name the server in messages when argv wraps the real command.
    label: str = ""

    def describe(self) -> str:
        if self.label:
            return self.label
        return " ".join(self.argv[:3]) + (" ..." if len(self.argv) > 3 else "")


@dataclass(frozen=True)
class HttpTarget:
    url: str
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    headers: Mapping[str, str] = field(default_factory=dict)
    # Networks the URL's resolved addresses may be in although they are internal.
    allowed_networks: Sequence[str] = ()
    # `_meta` keys of a request copied into HTTP headers of its POST ({meta key: header name}):
    # per-call values (a caller's identity) on a session whose client headers are fixed.
    meta_headers: Mapping[str, str] = field(default_factory=dict)
    # How to name the server in messages: its name, since a URL can carry a token in its path.
    label: str = ""
    # Per-request auth on top of the headers (one person's own upstream token).
    auth: httpx2.Auth | None = None

    def describe(self) -> str:
        return self.label or self.url


@dataclass(frozen=True)
class TransportTarget:
    """A ready-made SDK transport, e.g. a sandboxed container's attached stdio."""

    open_transport: Callable[[], Transport]
    description: str
    stderr_tail: Callable[[], str] = lambda: ""
    # What runs, for reports: e.g. the image, its digest and the command inside it.
    launched: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return self.description


Target = StdioTarget | HttpTarget | TransportTarget


@dataclass(frozen=True)
class Deadlines:
    connect: float = 20.0
    call: float = 30.0
