"""How tool definitions and agents' queries become terms, the same way for every database.

More: docs/search.md, "Module notes".
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from itertools import pairwise
from typing import Any

import snowballstemmer

MAX_QUERY_TERMS = 16
# Expansion terms come after the query's own, at most this many more.
MAX_EXPANSION_TERMS = 8
# An expansion term counts this much of a query's own term in the ranking.
EXPANSION_WEIGHT = 1.0
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


# Task words -> words of tool texts (tool actions, service vocabulary), lower case, unstemmed.
# The generated tools' actions are list, get, create, update, search, delete, export and
# summarize; the demo servers' are read, write, move, add and the git verbs.
QUERY_SYNONYMS: Mapping[str, tuple[str, ...]] = {
    # actions
    "make": ("create",),
    "new": ("create",),
    "open": ("create",),
    "start": ("create",),
    "send": ("create",),
    "post": ("create",),
    "share": ("permission",),
    "change": ("update",),
    "edit": ("update",),
    "modify": ("update",),
    "set": ("update",),
    "remove": ("delete",),
    "erase": ("delete",),
    "forget": ("delete",),
    "find": ("search",),
    "look": ("search",),
    "lookup": ("search",),
    "summary": ("summarize",),
    "overview": ("summarize",),
    "trend": ("summarize",),
    "stage": ("add",),
    "remember": ("memory", "observations"),
    # things
    "folder": ("directory",),
    "folders": ("directory",),
    "link": ("url",),
    "links": ("url",),
    "stock": ("inventory",),
    "units": ("quantity",),
    "vacation": ("time", "off"),
    "holiday": ("time", "off"),
    "leave": ("time", "off"),
}
# Two task words read as one (after splitting, before stop words are dropped).
QUERY_PHRASES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("on", "call"): ("oncall", "on", "call"),
    ("text", "message"): ("sms",),
    ("text", "messages"): ("sms",),
    ("time", "off"): ("time", "off"),
}


def _expansion_words(query_words: list[str]) -> list[str]:
    found: list[str] = []
    for first, second in pairwise(query_words):
        found.extend(QUERY_PHRASES.get((first, second), ()))
    for word in query_words:
        found.extend(QUERY_SYNONYMS.get(word, ()))
    return found


def weighted_query_terms(query: str) -> list[tuple[str, float]]:
    """The distinct search terms (stems) of a query with their weight in the ranking, in order:
    the query's own (1.0, at most MAX_QUERY_TERMS), then its expansions (`EXPANSION_WEIGHT`, at
    most MAX_EXPANSION_TERMS), a term already found keeping its first weight."""
    own: list[str] = []
    for term in terms(query):
        if term in own:
            continue
        own.append(term)
        if len(own) == MAX_QUERY_TERMS:
            break
    expansions: list[str] = []
    for word in _expansion_words(words(query)):
        if len(word) < 2:
            continue
        term = stem(word)
        if term in own or term in expansions:
            continue
        expansions.append(term)
        if len(expansions) == MAX_EXPANSION_TERMS:
            break
    return [(term, 1.0) for term in own] + [(term, EXPANSION_WEIGHT) for term in expansions]


def query_terms(query: str) -> list[str]:
    """The distinct search terms (stems) of a query, its own then its expansions: what the
    database matches."""
    return [term for term, _ in weighted_query_terms(query)]


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
