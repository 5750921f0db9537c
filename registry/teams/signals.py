"""The signal team changes send when what a team's agents may see could have changed.

Sent inside the transaction that makes the change (grants, revocations, roles, tokens), with
`team_ids` and `reason` (a short machine-readable word such as "grant.created"). The catalogue
listens and bumps the teams' catalogue versions in that same transaction, so the database never
holds a change the cache can hide. Servers announce theirs with
`registry.servers.signals.server_visibility_changed` (after commit); the catalogue listens to both,
and nothing here imports the catalogue.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.dispatch import Signal

team_visibility_changed = Signal()


def announce_team_change(*, team_ids: Iterable[int], reason: str) -> None:
    """Send `team_visibility_changed` now, inside the caller's transaction."""
    ids = sorted(set(team_ids))
    if ids:
        team_visibility_changed.send(sender=None, team_ids=ids, reason=reason)
