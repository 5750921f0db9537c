"""OpenTelemetry traces, only where an OTLP endpoint is configured: set-up and the MCP call spans.

`tracing_configure()` runs at Django's start-up (web, gateway, workers, beat). Without the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) it does nothing: no
OpenTelemetry module is imported and nothing is exported. With it, spans go over OTLP/HTTP
(protobuf) through a batch processor; Django requests and Celery tasks (publish and run) are traced
by the official instrumentations, and `mcp_span` traces one MCP request and puts its W3C trace
context (`traceparent`) into the request's `_meta`, so the server can join the trace.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEFAULT_SERVICE_NAME = "toolroom"
TRACEPARENT = "traceparent"

_lock = threading.Lock()
_provider: Any = None  # the SDK's TracerProvider once configured


def tracing_endpoint_configured() -> bool:
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_enabled() -> bool:
    return _provider is not None


def tracing_configure(*, service_name: str = DEFAULT_SERVICE_NAME) -> bool:
    """Start exporting traces if an OTLP endpoint is configured; True when tracing is on.

    The exporter reads the standard variables itself (endpoint, headers, timeout); the service
    name is `OTEL_SERVICE_NAME` when set, else `service_name`.
    """
    global _provider
    if not tracing_endpoint_configured():
        return False
    with _lock:
        if _provider is not None:
            return True
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or service_name
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        DjangoInstrumentor().instrument(tracer_provider=provider)
        CeleryInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
        _provider = provider
        return True


def tracing_shutdown() -> None:
    """Export what is pending, then stop tracing (the instrumentations are removed)."""
    global _provider
    with _lock:
        provider, _provider = _provider, None
        if provider is None:
            return
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().uninstrument()
        CeleryInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
        provider.shutdown()


@contextlib.contextmanager
def mcp_span(
    method: str,
    *,
    meta: Mapping[str, Any] | None = None,
    span_prefix: str = "mcp",
    attributes: Mapping[str, str | int] | None = None,
) -> Iterator[dict[str, Any] | None]:
    """A client span around one MCP request; yields the `_meta` to send with it.

    With tracing off, `meta` comes back as it was. With it on, the span's `traceparent` is added to
    a copy. When `meta` already carries a `traceparent` (the gateway's call, served by a session
    task or a runtime worker), the span is that one's child, whatever the current task's context.
    """
    provider = _provider
    if provider is None:
        yield dict(meta) if meta is not None else None
        return
    from opentelemetry import propagate, trace

    carrier: dict[str, Any] = dict(meta or {})
    parent = None
    if TRACEPARENT in carrier:
        parent = propagate.extract({TRACEPARENT: str(carrier[TRACEPARENT])})
    tracer = provider.get_tracer(__name__)
    with tracer.start_as_current_span(
        f"{span_prefix} {method}",
        context=parent,
        kind=trace.SpanKind.CLIENT,
        attributes={"rpc.system": "mcp", "rpc.method": method, **(attributes or {})},
    ):
        propagate.inject(carrier)
        yield carrier
