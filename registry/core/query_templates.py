"""Querysets compiled to SQL once per shape and run again with new values (hot read paths).

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet

TEMPLATES_KEPT = 256  # per connection object; shapes, not values

# Placeholders: values no real query passes (int32: Django's integer range checks keep them).
_INT_BASE = 2_018_265_431
_TEXT = "\x1etoolroom-template-{}\x1e"
_MOMENT = datetime(1901, 2, 3, 4, 5, 6, tzinfo=UTC)


def padded_length(count: int) -> int:
    """The list length a template is made for: the next power of two (0 stays 0)."""
    return 0 if count == 0 else 1 << (count - 1).bit_length()


def padded(values: Sequence[Any]) -> list[Any]:
    """`values` repeated at the end to its padded length (same meaning for an `IN` list)."""
    items = list(values)
    return items + [items[-1]] * (padded_length(len(items)) - len(items)) if items else []


@dataclass(frozen=True)
class _Slot:
    name: str
    index: int | None  # the position in a list value, or None for a single value
    prepare: Callable[[Any], Any]


def _value(values: dict[str, Any], slot: _Slot) -> Any:
    value = values[slot.name]
    return value if slot.index is None else value[slot.index]


class Placeholders:
    """The values a template's queryset is built from; each call makes a new placeholder and
    remembers how a real value becomes the parameter the database gets."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._next = 0
        self.expected: list[tuple[Any, _Slot]] = []

    def _int(self) -> int:
        self._next += 1
        return _INT_BASE + self._next * 7

    def number(self, name: str) -> int:
        value = self._int()
        self.expected.append((value, _Slot(name, None, int)))
        return value

    def numbers(self, name: str, length: int) -> list[int]:
        values = [self._int() for _ in range(length)]
        self.expected.extend((value, _Slot(name, i, int)) for i, value in enumerate(values))
        return values

    def text(self, name: str) -> str:
        self._next += 1
        value = _TEXT.format(self._next)
        self.expected.append((value, _Slot(name, None, str)))
        return value

    def moment(self, name: str) -> datetime:
        """A datetime for a DateTimeField lookup (adapted the way the backend stores them)."""
        self._next += 1
        value = _MOMENT.replace(microsecond=self._next)
        adapt = self._connection.ops.adapt_datetimefield_value
        self.expected.append((adapt(value), _Slot(name, None, adapt)))
        return value


def _slot_or_value(found: dict[Any, _Slot], param: Any) -> Any:
    try:
        return found.get(param, param)
    except TypeError:  # unhashable (a list, a dict for a JSON column): a constant of the query
        return param


class CompiledQuery:
    """One queryset's SQL with its parameters' places; `run` gives its rows (converted)."""

    def __init__(self, queryset: QuerySet[Any], placeholders: Placeholders) -> None:
        compiler = queryset.query.get_compiler(using=queryset.db)
        self.empty = False
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:  # e.g. `IN ()`: Django runs nothing and answers no rows
            self.empty, sql, params = True, "", ()
        self.sql: str = sql
        found = dict(placeholders.expected)
        self.params: list[Any] = [_slot_or_value(found, param) for param in params]
        missing = [slot.name for value, slot in placeholders.expected if value not in params]
        if missing and not self.empty:
            raise ValueError(f"a placeholder did not reach the SQL as it was: {missing}")
        self.converters: list[tuple[int, tuple[list[Any], Any]]] = []
        if not self.empty:
            fields = [column for column, _, _ in compiler.select[: compiler.col_count]]
            self.converters = list(compiler.get_converters(fields).items())
        self.connection = compiler.connection

    def run(self, **values: Any) -> list[Any]:
        """The rows (tuples, or lists where a value was converted) for these values."""
        if self.empty:
            return []
        params = [
            (param.prepare(_value(values, param)) if isinstance(param, _Slot) else param)
            for param in self.params
        ]
        with self.connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            rows: list[Any] = cursor.fetchall()
        if not self.converters:
            return rows
        converted = []
        connection = self.connection
        for row in map(list, rows):
            for position, (functions, expression) in self.converters:
                value = row[position]
                for function in functions:
                    value = function(value, expression, connection)
                row[position] = value
            converted.append(row)
        return converted


_kept: weakref.WeakKeyDictionary[Any, OrderedDict[Hashable, CompiledQuery]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def compiled_query(
    shape: Hashable,
    build: Callable[[Placeholders], QuerySet[Any]],
    *,
    using: str = "default",
) -> CompiledQuery:
    """The template of the queryset `build` makes for this shape, on this thread's connection
    (compiled now if this connection has not compiled it yet)."""
    connection = connections[using]
    with _lock:
        templates = _kept.setdefault(connection, OrderedDict())
        template = templates.get(shape)
    if template is None:
        placeholders = Placeholders(connection)
        template = CompiledQuery(build(placeholders).using(using), placeholders)
        with _lock:
            templates[shape] = template
            while len(templates) > TEMPLATES_KEPT:
                templates.popitem(last=False)
    return template
