"""Bumps the catalogue versions of the teams concerned whenever servers or tools change visibility.

`registry.servers` sends `server_visibility_changed` after commit for approvals, revocations,
rug pulls, permission classes, review status and (from the workers) health; every team holding a
grant on one of those servers gets a new version, so its next request sees the change.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from registry.catalogue.versions import catalogue_versions_bump, teams_granted_servers
from registry.servers.signals import server_visibility_changed


@receiver(server_visibility_changed, dispatch_uid="catalogue_bump_on_visibility_change")
def catalogue_bump_on_visibility_change(
    sender: Any, server_ids: list[int], reason: str, **kwargs: Any
) -> None:
    catalogue_versions_bump(team_ids=teams_granted_servers(server_ids), reason=reason)
