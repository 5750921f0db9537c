"""The authorization server's HTTP endpoints that are the toolkit's, as Toolroom runs them: RFC 8414
metadata (advertising what the admin's policy allows), RFC 9728 metadata of the gateway (also
served by the gateway itself), Dynamic Client Registration (public clients only, while the admin
allows it), the token and revocation endpoints. The consent page is the portal's
(registry/portal/consent.py)."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.views import (
    DynamicClientRegistrationView,
    OAuthServerMetadataView,
    RevokeTokenView,
    TokenView,
)

from registry.oauth.metadata import protected_resource_metadata
from registry.oauth.policy import registration_policy


class ServerMetadataView(OAuthServerMetadataView):
    """RFC 8414, with registration advertised as the admin's policy has it."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().get(request, *args, **kwargs)
        data = json.loads(response.content)
        policy = registration_policy()
        data["client_id_metadata_document_supported"] = policy.client_id_metadata_documents
        if not policy.dynamic_client_registration:
            data.pop("registration_endpoint", None)
        data.pop("introspection_endpoint_auth_methods_supported", None)
        answer = JsonResponse(data)
        answer["Access-Control-Allow-Origin"] = "*"
        answer["Cache-Control"] = "no-store"  # the admin may switch registration at any moment
        return answer


def protected_resource_metadata_view(request: HttpRequest, resource_path: str = "") -> HttpResponse:
    """RFC 9728 for the gateway, at the root and in the path-suffixed form (`/mcp`)."""
    answer = JsonResponse(protected_resource_metadata())
    answer["Access-Control-Allow-Origin"] = "*"
    return answer


class RegistrationView(DynamicClientRegistrationView):
    """RFC 7591 while the admin allows it; public clients (PKCE, no secret) only."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not registration_policy().dynamic_client_registration:
            return JsonResponse(
                {
                    "error": "access_denied",
                    "error_description": "Dynamic client registration is turned off on this "
                    "Toolroom; use a client ID metadata document, or ask an admin.",
                },
                status=403,
            )
        try:
            metadata = json.loads(request.body or b"null")
        except (ValueError, RecursionError):
            metadata = None
        if isinstance(metadata, dict):
            method = metadata.get("token_endpoint_auth_method", "none")
            if method != "none":
                return JsonResponse(
                    {
                        "error": "invalid_client_metadata",
                        "error_description": "Toolroom registers public clients only: use "
                        f"token_endpoint_auth_method 'none' (PKCE protects the code), not "
                        f"{str(method)[:60]!r}.",
                    },
                    status=400,
                )
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


@method_decorator(csrf_exempt, name="dispatch")
class ToolroomTokenView(TokenView):
    """The token endpoint; answers are never stored by a cache (RFC 6749 section 5.1)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response: HttpResponse = super().post(request, *args, **kwargs)
        response["Cache-Control"] = "no-store"
        return response


class ToolroomRevokeTokenView(RevokeTokenView):
    """RFC 7009: a client signs out."""
