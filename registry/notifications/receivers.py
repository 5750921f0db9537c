"""Access request changes become notifications: the teams services save every creation and state
change of an `AccessRequest`, whichever entry point called them (admin, API, portal), so one
receiver here sees them all and writes the outbox in the same transaction. Likewise a rug pull
found by a sync and a server suspended or retired become change notices (changes.py)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from registry.notifications import changes as notices
from registry.notifications.services import EVENTS, access_request_outbox
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.servers.signals import server_review_changed, tool_approvals_dropped
from registry.teams.models import AccessRequest


@receiver(post_save, sender=AccessRequest, dispatch_uid="notifications.access_request_changed")
def access_request_changed(
    sender: type[AccessRequest],
    instance: AccessRequest,
    created: bool,
    update_fields: frozenset[str] | None = None,
    **kwargs: Any,
) -> None:
    if kwargs.get("raw"):
        return  # fixtures being loaded
    if created or (update_fields is not None and "state" in update_fields):
        access_request_outbox(request=instance, event=EVENTS[instance.state])


@receiver(tool_approvals_dropped, dispatch_uid="notifications.tool_approvals_dropped")
def tool_approvals_dropped_notify(
    sender: object, server: McpServer, changes: list[tuple[Tool, str, str]], **kwargs: Any
) -> None:
    notices.tools_changed_outbox(server=server, changes=changes)


_UNAVAILABLE = {
    ReviewStatus.SUSPENDED: notices.SERVER_SUSPENDED,
    ReviewStatus.RETIRED: notices.SERVER_RETIRED,
}


@receiver(server_review_changed, dispatch_uid="notifications.server_review_changed")
def server_review_changed_notify(
    sender: object, server: McpServer, before: str, after: str, reason: str, **kwargs: Any
) -> None:
    event = _UNAVAILABLE.get(ReviewStatus(after))
    # From approved (usable until now) or suspended (retired: it will not come back).
    if event is not None and before in (ReviewStatus.APPROVED, ReviewStatus.SUSPENDED):
        notices.server_unavailable_outbox(server=server, event=event, reason=reason)
