"""The admin's switches for client registration, as the toolkit's permission classes ask them.

`AuthorizationServerPolicy` is one row (made on first read); both ways are on until an admin turns
them off. The toolkit's own DCR_ENABLED and CIMD_ENABLED stay on and these classes decide.
"""

from __future__ import annotations

from typing import Any

from registry.oauth.cimd import metadata_document_problem_record
from registry.oauth.models import AuthorizationServerPolicy


def registration_policy() -> AuthorizationServerPolicy:
    policy, _ = AuthorizationServerPolicy.objects.get_or_create(pk=1)
    return policy


class RegistrationAllowed:
    """DCR_REGISTRATION_PERMISSION_CLASSES: open registration while the admin allows it."""

    def has_permission(self, request: Any) -> bool:
        return registration_policy().dynamic_client_registration


class MetadataDocumentsAllowed:
    """CIMD_REGISTRATION_PERMISSION_CLASSES: metadata documents while the admin allows them."""

    def has_permission(self, request: Any, client_id: str) -> bool:
        if registration_policy().client_id_metadata_documents:
            return True
        metadata_document_problem_record(
            client_id, "client ID metadata documents are turned off on this Toolroom"
        )
        return False
