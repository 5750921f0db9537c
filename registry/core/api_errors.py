"""One error format for every API endpoint, whatever raised the error.

Body: {"error": {"code": "...", "message": "...", "fields": {name: [messages]}}}. DRF's own
exceptions, Django's ValidationError and the domain's ApplicationError all map onto it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from registry.core.errors import ApplicationError


def _as_field_messages(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        return {
            str(key): [str(item) for item in (value if isinstance(value, list) else [value])]
            for key, value in detail.items()
        }
    if isinstance(detail, list):
        return {"non_field_errors": [str(item) for item in detail]}
    return {}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, ApplicationError):
        fields = {exc.field: [exc.message]} if exc.field else {}
        return Response(
            {"error": {"code": "invalid", "message": exc.message, "fields": fields, **exc.extra}},
            status=status.HTTP_400_BAD_REQUEST,
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.APIException):
        detail = exc.detail
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "invalid"
        if isinstance(exc, exceptions.ValidationError):
            message = "The request is not valid."
            fields = _as_field_messages(detail)
        else:
            message = str(detail)
            fields = {}
        response.data = {"error": {"code": code, "message": message, "fields": fields}}
    return response
