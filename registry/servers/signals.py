"""The signals servers and tools send, so that the apps above that keep something derived from
them (the catalogue's versions, the search index) hear of changes without being imported.

More: docs/architecture.md, "Module notes"."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.dispatch import Signal

server_visibility_changed = Signal()
server_tools_changed = Signal()
tool_approvals_dropped = Signal()
server_review_changed = Signal()
# An import named the client Toolroom is to use at a per-person server's authorization server
# (an mcp.json `oauth` object's `clientId`): sent inside the import's transaction, with `server`,
# `actor`, `client_id`, `client_secret` and `scopes` ('' where the file gives none).
server_oauth_client_imported = Signal()


def announce_visibility_change(*, server_ids: Iterable[int], reason: str) -> None:
    """Send `server_visibility_changed` once the current transaction commits."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    transaction.on_commit(
        lambda: server_visibility_changed.send(sender=None, server_ids=ids, reason=reason)
    )


def announce_tools_change(*, server_ids: Iterable[int]) -> None:
    """Send `server_tools_changed` now, inside the caller's transaction."""
    ids = sorted(set(server_ids))
    if ids:
        server_tools_changed.send(sender=None, server_ids=ids)
