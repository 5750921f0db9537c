"""A real OTLP/HTTP trace receiver for the tracing tests: an HTTP server (in a thread) that decodes
the protobuf export requests the SDK's exporter POSTs to /v1/traces and keeps their spans."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value") or "string_value")


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                export = ExportTraceServiceRequest.FromString(body)
                receiver.take(self.path, export)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, path: str, export: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.paths.append(path)
            for resource_spans in export.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                service=str(resource.get("service.name", "")),
                                name=span.name,
                                kind=span.kind,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes={a.key: _value(a.value) for a in span.attributes},
                            )
                        )

    def wait_for_span(
        self, matches: Callable[[ReceivedSpan], bool], *, what: str, timeout: float = 30
    ) -> ReceivedSpan:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for span in self.spans:
                    if matches(span):
                        return span
            time.sleep(0.05)
        with self._lock:
            names = [(span.service, span.name) for span in self.spans]
        raise AssertionError(f"no span ({what}) exported within {timeout} s; got {names}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
