"""DRF throttles that keep counting in the cache without making the cache a point of failure."""

from __future__ import annotations

from typing import Any

from rest_framework.throttling import ScopedRateThrottle

from registry.core.cache import CACHE_ERRORS, cache_trip, catalogue_cache
from registry.core.client_address import request_client_address


class DegradableScopedRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle that lets requests through, uncounted, while the cache is down
    (degraded mode): a Redis outage must not turn every throttled endpoint into a 500 or make
    it wait for a timeout on each request. The circuit around the cache is the catalogue's.
    A request without a person is counted by its client address, Toolroom's (never an
    `X-Forwarded-For` the client wrote)."""

    def get_ident(self, request: Any) -> str:
        return request_client_address(request)

    def allow_request(self, request: Any, view: Any) -> bool:
        if catalogue_cache() is None:
            return True
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="throttle")
            return True
