"""HTTP to an upstream's authorization server, through Toolroom's network guard: the client lives
in registry/core/upstream_http.py (the import plan asks servers through it too)."""

from registry.core.upstream_http import (
    MAX_ANSWER_BYTES,
    TIMEOUT_SECONDS,
    UpstreamHttpError,
    UpstreamRefused,
    answer_json,
    guarded_url,
    upstream_request,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "TIMEOUT_SECONDS",
    "UpstreamHttpError",
    "UpstreamRefused",
    "answer_json",
    "guarded_url",
    "upstream_request",
]
