"""The upstream OAuth client an import names for a per-person server (an mcp.json `oauth` object's
`clientId`): what the plan shows of it, and the signal that has the upstream accounts app store it.

The client lives in `registry.upstream` (`UpstreamClient`), above this app: the plan reads the
stored one through the server's `upstream_client` relation, and applying sends
`server_oauth_client_imported`, which that app's receiver stores (docs/authentication.md).
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from registry.audit.services import Actor
from registry.core.secret_fields import mask_secret
from registry.servers.importing.changes import FieldChange
from registry.servers.models import McpServer
from registry.servers.signals import server_oauth_client_imported

# How the plan names the change (not a field of the server).
UPSTREAM_CLIENT = "upstream OAuth client"
ADMIN_REGISTRATION = "admin"  # registry.upstream.models.Registration.ADMIN


def upstream_callback_url() -> str:
    """Toolroom's redirect URI at every upstream (the portal's callback), which an imported
    client must allow."""
    return settings.TOOLROOM_PUBLIC_URL.rstrip("/") + reverse("portal:upstream-callback")


def _display(client_id: str, secret: str, scopes: str, registration: str) -> str:
    text = f"client id {client_id!r}"
    text += " (the admin's)" if registration == ADMIN_REGISTRATION else " (registered by Toolroom)"
    if secret:
        text += f", secret {mask_secret(secret)}"
    if scopes:
        text += f", scopes {scopes!r}"
    return text


def upstream_client_change(
    client: dict[str, str], existing: McpServer | None
) -> FieldChange | None:
    """The plan's line for the client the file names; None when the stored client is already it
    (the same client id entered by an admin, and the same secret and scopes where the file gives
    them)."""
    new = _display(
        client["client_id"], client["client_secret"], client["scopes"], ADMIN_REGISTRATION
    )
    stored = None
    if existing is not None and existing.pk is not None:
        stored = (
            McpServer.objects.filter(pk=existing.pk, upstream_client__isnull=False)
            .values_list(
                "upstream_client__client_id",
                "upstream_client__client_secret",
                "upstream_client__scopes",
                "upstream_client__registration",
            )
            .first()
        )
    if stored is None or not stored[0]:
        return FieldChange(UPSTREAM_CLIENT, "(none: Toolroom registers its own)", new)
    client_id, secret_json, scopes, registration = stored
    secret = (secret_json or {}).get("client_secret", "")
    if (
        registration == ADMIN_REGISTRATION
        and client_id == client["client_id"]
        and client["client_secret"] in ("", secret)
        and client["scopes"] in ("", scopes)
    ):
        return None
    return FieldChange(UPSTREAM_CLIENT, _display(client_id, secret, scopes, registration), new)


def upstream_client_announce(*, server: McpServer, client: dict[str, str], actor: Actor) -> None:
    """Have the upstream accounts app store the client (inside the import's transaction)."""
    server_oauth_client_imported.send(sender=None, server=server, actor=actor, **client)
