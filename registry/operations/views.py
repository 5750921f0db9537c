"""Probes for the people and orchestrators running Toolroom: `/healthz`, `/readyz`, `/metrics`."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from registry.operations.metrics import metrics_allowed, metrics_exposition
from registry.operations.readiness import FAILING, readiness_report


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


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics, for a bearer token or an allowed network only (else 404)."""
    if not metrics_allowed(
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        authorization=request.headers.get("Authorization", ""),
        forwarded="X-Forwarded-For" in request.headers,
    ):
        raise Http404
    return HttpResponse(metrics_exposition(), content_type=CONTENT_TYPE_LATEST)
