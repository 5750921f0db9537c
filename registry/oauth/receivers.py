"""A person deactivated (or reactivated) anywhere, the Django admin's user page included, moves
the catalogue versions of their teams, so their tokens are checked again on the very next call."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from registry.teams.models import Membership
from registry.teams.signals import announce_team_change

User = get_user_model()


@receiver(pre_save, sender=User, dispatch_uid="oauth_person_activity_before")
def person_activity_before(
    sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any
) -> None:
    if instance.pk is None or (update_fields is not None and "is_active" not in update_fields):
        instance._toolroom_was_active = None
        return
    instance._toolroom_was_active = (
        User.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


@receiver(post_save, sender=User, dispatch_uid="oauth_person_activity_after")
def person_activity_after(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    was = getattr(instance, "_toolroom_was_active", None)
    if created or was is None or was == instance.is_active:
        return
    teams = Membership.objects.filter(user_id=instance.pk).values_list("team_id", flat=True)
    announce_team_change(team_ids=list(teams), reason="person.activity_changed")
