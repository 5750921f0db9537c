"""Creating and editing server categories."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from registry.audit.services import Actor, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import (
    Category,
)
from registry.servers.signals import announce_visibility_change


def _clean_category(category: Category) -> None:
    try:
        category.full_clean()
    except ValidationError as exc:
        first, messages = next(iter(exc.message_dict.items()))
        raise ApplicationError(" ".join(messages), field=first) from exc


@transaction.atomic
def category_create(*, actor: Actor, slug: str, name: str, description: str = "") -> Category:
    category = Category(slug=slug, name=name, description=description)
    _clean_category(category)
    category.save()
    audit_record(
        actor=actor,
        action="category.created",
        target=category,
        summary=f"Created the category {name}.",
        after={"slug": slug, "name": name, "description": description},
    )
    return category


@transaction.atomic
def category_update(*, actor: Actor, category: Category, name: str, description: str) -> Category:
    before = {"name": category.name, "description": category.description}
    category.name, category.description = name, description
    _clean_category(category)
    category.save(update_fields=["name", "description"])
    # Catalogues show the category's name: the servers in it change for agents.
    announce_visibility_change(
        server_ids=list(category.servers.values_list("pk", flat=True)), reason="category.updated"
    )
    audit_record(
        actor=actor,
        action="category.updated",
        target=category,
        summary=f"Changed the category {category.slug}.",
        before=before,
        after={"name": name, "description": description},
    )
    return category
