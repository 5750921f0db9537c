"""Admin pages that apps above add to: a read-only line in one of the page's fieldsets, or a view
under the page's URL, so that the app owning the page imports none of them.

The contributing app adds itself from its own admin module (the gateway's policy line on the
server page, the access rules' "Why not?" view on the team page); Django imports every app's admin
module at start-up, before any page is served.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, TypeVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.safestring import SafeString

M = TypeVar("M", bound=Model)

# A contributed view: (the page's admin, the request, the object's id) -> the answer.
PageView = Callable[[Any, HttpRequest, str], HttpResponse]


class ContributedPage(admin.ModelAdmin[M]):
    """A ModelAdmin whose page other apps add lines and views to (see the module's docstring)."""

    contributed_lines: ClassVar[list[tuple[str, str]]]  # (fieldset title, field name)
    contributed_views: ClassVar[list[tuple[str, str, PageView]]]  # (route, URL name, view)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.contributed_lines = []
        cls.contributed_views = []

    @classmethod
    def contribute_line(
        cls,
        *,
        fieldset: str,
        name: str,
        description: str,
        line: Callable[[M], SafeString],
    ) -> None:
        """Show `line(obj)` as the read-only field `name` at the end of the fieldset titled
        `fieldset`."""

        def show(self: Any, obj: M) -> SafeString:
            return line(obj)

        setattr(cls, name, admin.display(description=description)(show))
        cls.contributed_lines.append((fieldset, name))

    @classmethod
    def contribute_view(cls, *, route: str, name: str, view: PageView) -> None:
        """Serve `view(page_admin, request, object_id)` at `route` (under the page's URL, with
        `<path:object_id>` in it) as `admin:<name>`."""
        cls.contributed_views.append((route, name, view))

    def get_fieldsets(self, request: HttpRequest, obj: M | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        added: dict[str, list[str]] = {}
        for title, name in self.contributed_lines:
            added.setdefault(title, []).append(name)
        return [
            (title, {**options, "fields": [*options["fields"], *added.get(str(title or ""), [])]})
            for title, options in fieldsets
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: M | None = None) -> Any:
        contributed = [name for _, name in self.contributed_lines]
        return [*super().get_readonly_fields(request, obj), *contributed]

    def get_urls(self) -> list[URLPattern]:
        contributed = [
            path(route, self.admin_site.admin_view(partial(view, self)), name=name)
            for route, name, view in self.contributed_views
        ]
        return [*contributed, *super().get_urls()]
