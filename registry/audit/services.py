"""Writing the audit trail: `audit_record` is called by every service that changes state."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import models

from registry.audit.models import AuditEvent

# A person (a user), or a label for whatever acted without one: "system", "worker:discovery",
# "cli", "agent:<name>".
Actor = AbstractBaseUser | AnonymousUser | str | None


def actor_label(actor: Actor) -> str:
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    if isinstance(actor, AnonymousUser):
        return "anonymous"
    return actor.get_username()


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: models.Model,
    summary: str,
    server: models.Model | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    user = actor if isinstance(actor, AbstractBaseUser) else None
    return AuditEvent.objects.create(
        actor=user,
        actor_label=actor_label(actor)[:200],
        action=action,
        target_type=target._meta.model_name or type(target).__name__.lower(),
        target_id=str(target.pk),
        target_repr=str(target)[:300],
        server=server,  # type: ignore[misc]
        summary=summary,
        before=before,
        after=after,
        details=details or {},
    )
