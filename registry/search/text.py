"""How tool definitions and agents' queries become words, the same way for every database.

Both databases split on their own too, but not alike (PostgreSQL keeps `git-log` whole beside its
parts, SQLite does not; neither splits `readFile`), so the index holds words split here: names on
`_`, `-`, `.`, `/` and camelCase, lower case. Queries become a plain list of words without
common English stop words (SQLite has no stop-word list, PostgreSQL's `english` one drops them),
so both databases see the same terms; each then stems them its own way (Porter on both).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MAX_QUERY_TERMS = 16
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z0-9]+")
# Common English function words: identical to neither database's list on purpose, so that both
# get the same terms (PostgreSQL drops its own stop words again, which changes nothing).
STOP_WORDS = frozenset(
    """a about above after again all also am an and any are as at be been before being below
    between both but by can could did do does doing down during each few for from further had has
    have having he her here hers him his how i if in into is it its itself just me more most my no
    nor not now of off on once only or other our out over own same she should so some such than
    that the their them then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your""".split()  # noqa: SIM905
)


def words(text: str) -> list[str]:
    """Lower-case words of `text`, identifiers split (`read_file`, `readFile` -> read, file)."""
    return [part.lower() for token in _WORD.findall(text) for part in _CAMEL.split(token) if part]


def index_text(text: str) -> str:
    return " ".join(words(text))


def query_terms(query: str) -> list[str]:
    """The distinct search terms of a query, in order, at most MAX_QUERY_TERMS."""
    terms: list[str] = []
    for word in words(query):
        if word in STOP_WORDS or word in terms:
            continue
        terms.append(word)
        if len(terms) == MAX_QUERY_TERMS:
            break
    return terms


def schema_text(schema: Mapping[str, Any] | None, *, depth: int = 0) -> str:
    """Parameter names and descriptions of a JSON Schema, nested objects two levels deep."""
    if not isinstance(schema, Mapping) or depth > 2:
        return ""
    parts: list[str] = []
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, spec in properties.items():
            parts.append(str(name))
            if isinstance(spec, Mapping):
                for key in ("title", "description"):
                    if isinstance(spec.get(key), str):
                        parts.append(spec[key])
                parts.append(schema_text(spec, depth=depth + 1))
                items = spec.get("items")
                if isinstance(items, Mapping):
                    parts.append(schema_text(items, depth=depth + 1))
    return " ".join(part for part in parts if part)


def joined(parts: Iterable[str | None]) -> str:
    return index_text(" ".join(part for part in parts if part))
