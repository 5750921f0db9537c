"""One base for admin pages whose saves go through services: a refusal becomes the page's error.

Toolroom's admin never saves a model itself: `save_model` calls a service (validated, in one
transaction, audited). `ServiceAdmin.run_service` runs that call; an `ApplicationError` becomes an
error message and marks the save failed, and the add and change answers then go back to the form
instead of announcing a success. What a save must hand to the page that answers it (a new token's
plain text, shown once) goes through `hand_over`/`handed_over`, kept beside the request rather
than as attributes set on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from django.contrib import admin, messages
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from registry.core.errors import ApplicationError

T = TypeVar("T")
M = TypeVar("M", bound=Model)

_FAILED = "save_failed"
# Per request: what its save left for its answer. Gone with the request.
_handed: WeakKeyDictionary[HttpRequest, dict[str, Any]] = WeakKeyDictionary()
_handed_lock = threading.Lock()  # requests are served by several threads at once


class ServiceAdmin(admin.ModelAdmin[M]):
    """A ModelAdmin of model M that saves through services (see the module's docstring)."""

    def run_service(self, request: HttpRequest, call: Callable[[], T]) -> T | None:
        """`call()`, or None after showing its refusal and marking the save failed."""
        try:
            return call()
        except ApplicationError as exc:
            messages.error(request, exc.message)
            self.hand_over(request, _FAILED, True)
            return None

    def try_service(self, request: HttpRequest, call: Callable[..., Any]) -> None:
        """`call()`; a refusal is shown and the rest of the save goes on (rows of a formset)."""
        try:
            call()
        except ApplicationError as exc:
            messages.error(request, exc.message)

    def run_each(self, request: HttpRequest, items: Iterable[T], call: Callable[[T], Any]) -> int:
        """`call(item)` for each item (a bulk action); a refusal is shown and the others go on.
        Returns how many went through."""
        done = 0
        for item in items:
            try:
                call(item)
            except ApplicationError as exc:
                messages.error(request, exc.message)
            else:
                done += 1
        return done

    def save_failed(self, request: HttpRequest) -> bool:
        return bool(self.handed_over(request, _FAILED))

    def hand_over(self, request: HttpRequest, key: str, value: Any) -> None:
        with _handed_lock:
            _handed.setdefault(request, {})[key] = value

    def handed_over(self, request: HttpRequest, key: str) -> Any:
        with _handed_lock:
            return _handed.get(request, {}).get(key)

    def response_add(
        self, request: HttpRequest, obj: M, post_url_continue: str | None = None
    ) -> HttpResponse:
        if self.save_failed(request):
            return HttpResponseRedirect(request.path)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: M) -> HttpResponse:
        if self.save_failed(request):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)
