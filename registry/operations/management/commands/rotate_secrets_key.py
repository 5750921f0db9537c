"""`manage.py rotate_secrets_key`: re-encrypt every stored secret with the first key.

Rotation: put the new Fernet key first in TOOLROOM_SECRETS_KEY and keep the old one after it
(`TOOLROOM_SECRETS_KEY=new,old`), run this command, then drop the old key. Until then both keys
decrypt, so nothing is unreadable at any moment.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from registry.audit.services import audit_record
from registry.core.secret_fields import EncryptedJSONField
from registry.notifications.services import webhook_secrets_reencrypt
from registry.servers.models import McpServer


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (servers' env and headers, webhook signing secrets) with "
        "the first key of "
        "TOOLROOM_SECRETS_KEY, so older keys can then be removed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=200)

    def handle(self, *args: Any, **options: Any) -> None:
        fields = [
            field.name
            for field in McpServer._meta.get_fields()
            if isinstance(field, EncryptedJSONField)
        ]
        rewritten = 0
        ids = list(McpServer.objects.order_by("pk").values_list("pk", flat=True))
        for start in range(0, len(ids), options["batch_size"]):
            with transaction.atomic():
                batch = McpServer.objects.select_for_update().filter(
                    pk__in=ids[start : start + options["batch_size"]]
                )
                for server in batch:
                    # Reading decrypts with whichever key fits; saving encrypts with the first.
                    server.save(update_fields=fields)
                    rewritten += 1
        webhooks = webhook_secrets_reencrypt()
        first = McpServer.objects.order_by("pk").first()
        if first is not None:
            audit_record(
                actor="cli:rotate_secrets_key",
                action="secrets.rotated",
                target=first,
                summary=f"Re-encrypted the secrets of {rewritten} server(s) with the first key.",
                details={"servers": rewritten, "fields": fields, "webhooks": webhooks},
            )
        self.stdout.write(
            f"Re-encrypted {', '.join(fields)} of {rewritten} server(s) and the signing secrets "
            f"of {webhooks} webhook(s) with the first key. "
            "Older keys can now be removed from TOOLROOM_SECRETS_KEY."
        )
