"""The signal servers and tools send when what agents may see of them could have changed.

Sent after the transaction commits, with `server_ids` (the servers concerned) and `reason` (a
short machine-readable word such as "tool.approved"). The catalogue listens to invalidate its
caches; nothing else should need it.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.dispatch import Signal

server_visibility_changed = Signal()


def announce_visibility_change(*, server_ids: Iterable[int], reason: str) -> None:
    """Send `server_visibility_changed` once the current transaction commits."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    transaction.on_commit(
        lambda: server_visibility_changed.send(sender=None, server_ids=ids, reason=reason)
    )
