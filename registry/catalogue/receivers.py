"""Bumps the catalogue versions of the teams concerned whenever servers or tools change visibility.

`registry.servers` sends `server_visibility_changed` after commit for approvals, revocations,
rug pulls, permission classes, review status and (from the workers) health; every team holding a
grant on one of those servers gets a new version, so its next request sees the change.
`registry.teams` sends `team_visibility_changed` inside the transaction of a grant, revocation,
role or token change; those teams' versions are bumped in that same transaction.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from registry.catalogue.versions import (
    catalogue_versions_bump,
    catalogue_versions_bump_on_commit,
    teams_granted_servers,
)
from registry.servers.signals import server_visibility_changed
from registry.teams.signals import team_visibility_changed


@receiver(server_visibility_changed, dispatch_uid="catalogue_bump_on_visibility_change")
def catalogue_bump_on_visibility_change(
    sender: Any, server_ids: list[int], reason: str, **kwargs: Any
) -> None:
    catalogue_versions_bump(team_ids=teams_granted_servers(server_ids), reason=reason)


@receiver(team_visibility_changed, dispatch_uid="catalogue_bump_on_team_change")
def catalogue_bump_on_team_change(
    sender: Any, team_ids: list[int], reason: str, **kwargs: Any
) -> None:
    catalogue_versions_bump_on_commit(team_ids=team_ids, reason=reason)
