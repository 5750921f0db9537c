"""Request ids and JSON log lines: one id per web request (taken from `X-Request-ID` when it is
sane, else new), on every log line while it is handled, sent along with the tasks it enqueues and
set again while a worker runs them, so one id follows a request into the work it started.

`LOG_FORMAT=json` turns log lines into JSON objects (one a line) with the id; the plain format
stays as it was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

REQUEST_ID_HEADER = "X-Request-ID"
# The Celery message header that carries it (registry/core/task_queue.py, workers/lifecycle.py).
TASK_HEADER = "toolroom_request_id"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

current_request_id: ContextVar[str | None] = ContextVar("toolroom_request_id", default=None)


@contextlib.contextmanager
def request_id_bound(request_id: str | None) -> Iterator[str | None]:
    """Run the block under this request id (None: none)."""
    token = current_request_id.set(request_id)
    try:
        yield request_id
    finally:
        current_request_id.reset(token)


def request_id_for(given: str | None) -> str:
    """The client's id if it is sane, else a new one: a version 4 UUID's hex, as `uuid.uuid4()`
    makes them, from the `random` module (reseeded in every forked child) instead of
    `os.urandom`. An id only tells requests apart (a client may choose its own): it needs no
    secrecy, and `os.urandom` lets go of the GIL for its system call, which made the ASGI fast
    path's event loop wait for the GIL behind the build threads on every answer it built."""
    if given and _SANE.match(given):
        return given
    return uuid.UUID(int=random.getrandbits(128), version=4).hex


class RequestIdMiddleware:
    """Binds a request id for the request and answers it in `X-Request-ID`."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        with request_id_bound(request_id_for(request.headers.get(REQUEST_ID_HEADER))) as rid:
            response: HttpResponseBase = self.get_response(request)
        response[REQUEST_ID_HEADER] = str(rid)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        with request_id_bound(request_id_for(request.headers.get(REQUEST_ID_HEADER))) as rid:
            get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
            response = await get_response(request)
        response[REQUEST_ID_HEADER] = str(rid)
        return response


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record (`-` outside a request or task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or current_request_id.get(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)
