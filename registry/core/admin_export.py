"""CSV export of an admin list, with the filters, search and date the list shows, streamed."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import URLPattern, path
from django.utils import timezone

EXPORT_CHUNK_ROWS = 2000
CSV_CHANGE_LIST_TEMPLATE = "admin/change_list_csv.html"


class _Echo:
    """A file-like object whose write returns the line, for csv.writer in a generator."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    text = str(value)
    # A spreadsheet would run a cell starting with one of these as a formula (CSV injection).
    if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class CsvExportMixin:
    """Adds `export.csv` beside a ModelAdmin's list: the rows the list shows under its current
    filters, search and date drill-down (the same query string), every page of them, streamed.

    Only someone who may view the list may export it (the admin's own staff check comes first).
    `csv_columns` lists (header, field name or callable on the row); the admin sets
    `change_list_template = CSV_CHANGE_LIST_TEMPLATE` for the link."""

    csv_columns: ClassVar[list[tuple[str, str | Callable[[Any], Any]]]] = []

    def get_urls(self) -> list[URLPattern]:
        model_admin: Any = self
        opts = model_admin.model._meta
        export = path(
            "export.csv",
            model_admin.admin_site.admin_view(self.csv_export_view),
            name=f"{opts.app_label}_{opts.model_name}_export",
        )
        return [export, *super().get_urls()]  # type: ignore[misc]

    def csv_export_view(self, request: HttpRequest) -> StreamingHttpResponse:
        model_admin: Any = self
        if not model_admin.has_view_permission(request):
            raise PermissionDenied
        changelist = model_admin.get_changelist_instance(request)
        rows: models.QuerySet[Any] = changelist.queryset
        opts = model_admin.model._meta
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response = StreamingHttpResponse(
            self._csv_lines(rows), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="{opts.app_label}-{opts.model_name}-{stamp}.csv"'
        )
        return response

    def _csv_lines(self, rows: models.QuerySet[Any]) -> Iterator[str]:
        writer = csv.writer(_Echo())
        yield writer.writerow([header for header, _ in self.csv_columns])
        for row in rows.iterator(chunk_size=EXPORT_CHUNK_ROWS):
            yield writer.writerow(
                [_cell(self._value(row, source)) for _, source in self.csv_columns]
            )

    @staticmethod
    def _value(row: Any, source: str | Callable[[Any], Any]) -> Any:
        if callable(source):
            return source(row)
        return getattr(row, source)
