"""Probes for the people and orchestrators running Toolroom: `/healthz` and `/readyz`."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from registry.core.readiness import FAILING, readiness_report


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is alive and answers; checks nothing else (a restart would not help)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Every component and the overall verdict; 503 only when failing (no database)."""
    report = readiness_report()
    return JsonResponse(report, status=503 if report["status"] == FAILING else 200)
