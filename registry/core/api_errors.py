"""One error format for every API endpoint, whatever raised the error.

Body: {"error": {"code": "...", "message": "...", "fields": {name: [messages]}}}. DRF's own
exceptions, Django's ValidationError and the domain's ApplicationError all map onto it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from registry.core.errors import ApplicationError

# Where answers are JSON, errors included (Django's own 404/400/403/500 too: see registry.urls).
API_PATH_PREFIXES = ("/api/", "/v0.1/")


def _as_field_messages(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Flatten DRF's error detail into `{"field.sub[0]": [messages]}`: nested serializers and
    list items get dotted names instead of a Python repr of the inner dict."""
    fields: dict[str, list[str]] = {}

    def walk(item: Any, name: str) -> None:
        if isinstance(item, dict):
            for key, value in item.items():
                walk(value, f"{name}.{key}" if name else str(key))
        elif isinstance(item, list):
            if all(not isinstance(inner, (dict, list)) for inner in item):
                fields.setdefault(name or "non_field_errors", []).extend(str(i) for i in item)
            else:
                for index, inner in enumerate(item):
                    if inner:  # DRF puts {} for list items without errors
                        walk(inner, f"{name}[{index}]")
        else:
            fields.setdefault(name or "non_field_errors", []).append(str(item))

    walk(detail, prefix)
    return fields


def api_error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> Any:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith(API_PATH_PREFIXES)


def api_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: the documented JSON error shape under the API, Django's page elsewhere."""
    if _is_api_path(request):
        return JsonResponse(api_error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def api_bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api_path(request):
        return JsonResponse(
            api_error_body("bad_request", "The request could not be read."), status=400
        )
    return defaults.bad_request(request, exception)


def api_permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api_path(request):
        return JsonResponse(
            api_error_body("permission_denied", "You do not have permission to do this."),
            status=403,
        )
    return defaults.permission_denied(request, exception)


def api_server_error(request: HttpRequest) -> HttpResponse:
    if _is_api_path(request):
        return JsonResponse(
            api_error_body("server_error", "Toolroom failed to answer; the error was logged."),
            status=500,
        )
    return defaults.server_error(request)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, ApplicationError):
        body = api_error_body(
            "invalid", exc.message, {exc.field: [exc.message]} if exc.field else {}
        )
        body["error"].update(exc.extra)
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
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
        response.data = api_error_body(code, message, fields)
    return response
