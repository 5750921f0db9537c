"""`/.well-known/jwks.json`: the public keys of the identity tokens passed to servers."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from registry.gateway.identity import identity_jwks


@require_GET
def jwks_view(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(identity_jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response
