"""A person who no longer belongs to any team holding a per-person server loses their link (or
secret) there: a membership removed (the admin, the API, single sign-on's group sync, a team
deleted) or a grant revoked or deleted removes, after commit, the accounts nobody's team holds any
more (`upstream_accounts_prune`, audited, tokens revoked at the upstream). An import that names a
per-person server's OAuth client has it stored as the admin's (`upstream_client_import`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from registry.servers.models import McpServer
from registry.servers.signals import server_oauth_client_imported
from registry.teams.models import Grant, Membership
from registry.upstream.services import upstream_accounts_prune, upstream_client_import


@receiver(post_delete, sender=Membership, dispatch_uid="upstream_membership_removed")
def membership_removed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    person_id, team_id = instance.user_id, instance.team_id
    transaction.on_commit(
        lambda: upstream_accounts_prune(
            person_ids=[person_id], reason=f"removed from team #{team_id}"
        )
    )


@receiver(post_save, sender=Grant, dispatch_uid="upstream_grant_revoked")
def grant_revoked(sender: Any, instance: Grant, **kwargs: Any) -> None:
    if instance.revoked_at is None:
        return
    server_id = instance.server_id
    transaction.on_commit(
        lambda: upstream_accounts_prune(server_ids=[server_id], reason="a grant was revoked")
    )


@receiver(post_delete, sender=Grant, dispatch_uid="upstream_grant_deleted")
def grant_deleted(sender: Any, instance: Grant, **kwargs: Any) -> None:
    server_id = instance.server_id
    transaction.on_commit(
        lambda: upstream_accounts_prune(server_ids=[server_id], reason="a grant was deleted")
    )


@receiver(server_oauth_client_imported, dispatch_uid="upstream_client_imported")
def client_imported(sender: Any, server: McpServer, **client: Any) -> None:
    upstream_client_import(
        actor=client["actor"],
        server=server,
        client_id=client["client_id"],
        client_secret=client["client_secret"],
        scopes=client["scopes"],
    )
