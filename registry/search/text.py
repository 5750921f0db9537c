"""How tool definitions and agents' queries become terms, the same way for every database.

Both databases split and stem on their own too, but not alike (PostgreSQL keeps `git-log` whole
beside its parts, SQLite does not; neither splits `readFile`; PostgreSQL stems with Snowball's
English stemmer, SQLite's FTS5 with the older Porter one), so the index holds terms made here:
words split on `_`, `-`, `.`, `/` and camelCase, lower case, common English stop words dropped,
each stemmed by Snowball's English stemmer (`snowballstemmer`, the algorithm PostgreSQL's
`english` configuration uses). Both databases then index these terms as they are (PostgreSQL's
`simple` configuration, FTS5's `unicode61` tokenizer without `porter`), and queries become terms
the same way: a database matches exactly the terms the shared ranking (registry.search.ranking)
counts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import snowballstemmer

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
    we were what when where which while who whom why will with would you your
    many much please want need let us""".split()  # noqa: SIM905
)


def words(text: str) -> list[str]:
    """Lower-case words of `text`, identifiers split (`read_file`, `readFile` -> read, file)."""
    return [part.lower() for token in _WORD.findall(text) for part in _CAMEL.split(token) if part]


# A stemmer keeps its word while it works: one per thread (the web server's threads stem at once).
_stemmers = threading.local()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball English stem of a lower-case word (`histories` -> `histori`)."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = snowballstemmer.stemmer("english")
    return str(stemmer.stemWord(word))


def terms(text: str) -> list[str]:
    """The index terms of `text`, in order: its words less stop words and single characters,
    stemmed."""
    return [stem(word) for word in words(text) if len(word) > 1 and word not in STOP_WORDS]


def index_text(text: str) -> str:
    return " ".join(terms(text))


def query_terms(query: str) -> list[str]:
    """The distinct search terms (stems) of a query, in order, at most MAX_QUERY_TERMS."""
    found: list[str] = []
    for term in terms(query):
        if term in found:
            continue
        found.append(term)
        if len(found) == MAX_QUERY_TERMS:
            break
    return found


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
