"""Access request changes become notifications: the teams services save every creation and state
change of an `AccessRequest`, whichever entry point called them (admin, API, portal), so one
receiver here sees them all and writes the outbox in the same transaction."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from registry.notifications.services import EVENTS, access_request_outbox
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
        access_request_outbox(request=instance, event=EVENTS[instance.state])  # type: ignore[index]
