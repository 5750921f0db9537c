"""The order of search results: one BM25F ranking, the same on every database.

More: docs/search.md, "Module notes".
"""

from __future__ import annotations

import heapq
import math
import threading
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from registry.search.index import INDEX_FIELDS
from registry.search.thesaurus import Thesaurus, thesaurus

# Field weights and length normalisation (b) of BM25F, by index field.
FIELD_WEIGHTS: Mapping[str, float] = {
    "name_text": 3.0,
    "title_text": 2.0,
    "params_text": 0.3,
    "description_text": 1.5,
    "context_text": 0.5,
}
FIELD_LENGTH_NORMALISATION: Mapping[str, float] = {
    "name_text": 0.3,
    "title_text": 0.3,
    "params_text": 0.75,
    "description_text": 0.75,
    "context_text": 0.5,
}
K1 = 2.0
# Shorter terms match only themselves: a prefix of 3 letters matches too much.
PREFIX_MIN_LENGTH = 4
PREFIX_WEIGHT = 0.5
# A query term no tool of the collection holds (not even as a prefix) is looked up in the
# thesaurus (registry.search.thesaurus): its first THESAURUS_TERMS_PER_TERM related stems that
# the collection holds are searched too, at most THESAURUS_MAX_TERMS a query, each counting
# THESAURUS_WEIGHT of a query's own term.
THESAURUS_WEIGHT = 0.5
THESAURUS_TERMS_PER_TERM = 3
THESAURUS_MAX_TERMS = 8
# Per-term results a model keeps (postings, thesaurus stems): agents choose the terms, so what a
# model (kept per catalogue version) remembers of them is bounded; past this, terms are
# worked out again on each query that has them.
TERMS_KEPT_MAX = 20_000


@dataclass(frozen=True)
class SearchDocument:
    """One tool as the ranking sees it: its id, its tie-breaking name, its text by field."""

    tool_id: int
    name: str
    fields: Mapping[str, str]


@dataclass(frozen=True)
class _Postings:
    weights: dict[int, float]  # tool id -> field-weighted, length-normalised term frequency
    idf: float


class SearchModel:
    """Term statistics of one collection of tools, and the ranking over it."""

    def __init__(self, documents: Sequence[SearchDocument]) -> None:
        self.names = {document.tool_id: document.name for document in documents}
        count = len(documents)
        counters = {
            document.tool_id: [Counter(document.fields.get(f, "").split()) for f in INDEX_FIELDS]
            for document in documents
        }
        average = [
            (sum(sum(c[i].values()) for c in counters.values()) / count) if count else 0.0
            for i in range(len(INDEX_FIELDS))
        ]
        weights = [FIELD_WEIGHTS[f] for f in INDEX_FIELDS]
        norms = [FIELD_LENGTH_NORMALISATION[f] for f in INDEX_FIELDS]
        exact: dict[str, dict[int, float]] = {}
        for tool_id, fields in counters.items():
            for i, counter in enumerate(fields):
                if not counter:
                    continue
                length = sum(counter.values())
                denominator = 1.0 - norms[i] + norms[i] * (length / average[i] if average[i] else 1)
                for term, frequency in counter.items():
                    postings = exact.setdefault(term, {})
                    postings[tool_id] = postings.get(tool_id, 0.0) + (
                        weights[i] * frequency / denominator
                    )
        self._exact = exact
        self._vocabulary = sorted(exact)
        self._count = count
        self._postings: dict[str, _Postings] = {}
        self._related: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def holds(self, term: str) -> bool:
        """Whether a tool of the collection holds `term`, or a longer term it begins when it is
        long enough to match as a prefix (what the database would match)."""
        if term in self._exact:
            return True
        return len(term) >= PREFIX_MIN_LENGTH and bool(self._longer_terms(term))

    def _thesaurus_terms(self, term: str, source: Thesaurus) -> tuple[str, ...]:
        with self._lock:
            cached = self._related.get(term)
        if cached is not None:
            return cached
        found: tuple[str, ...] = ()
        if not self.holds(term):
            held = [related for related in source.related(term) if related in self._exact]
            found = tuple(held[:THESAURUS_TERMS_PER_TERM])
        with self._lock:
            if len(self._related) < TERMS_KEPT_MAX:
                self._related[term] = found
        return found

    def expanded(
        self, terms: Sequence[tuple[str, float]], *, source: Thesaurus | None = None
    ) -> list[tuple[str, float]]:
        """The query's weighted terms, then the thesaurus's stems for those no tool holds.

        A term some tool holds is never expanded (its own match is the evidence); an unheld
        term gets its first THESAURUS_TERMS_PER_TERM related stems that a tool holds exactly, at
        THESAURUS_WEIGHT, at most THESAURUS_MAX_TERMS in all. Both depend only on the terms and
        the collection (the catalogue version), so equal term sets get equal answers."""
        source = thesaurus() if source is None else source
        seen = {term for term, _ in terms}
        added: list[tuple[str, float]] = []
        for term, _ in terms:
            for related in self._thesaurus_terms(term, source):
                if related in seen:
                    continue
                seen.add(related)
                added.append((related, THESAURUS_WEIGHT))
                if len(added) == THESAURUS_MAX_TERMS:
                    return [*terms, *added]
        return [*terms, *added]

    def _term_postings(self, term: str) -> _Postings:
        with self._lock:
            cached = self._postings.get(term)
        if cached is not None:
            return cached
        weights = dict(self._exact.get(term, {}))
        if len(term) >= PREFIX_MIN_LENGTH:
            for longer in self._longer_terms(term):
                for tool_id, weight in self._exact[longer].items():
                    weights[tool_id] = weights.get(tool_id, 0.0) + PREFIX_WEIGHT * weight
        frequency = len(weights)
        idf = math.log(1.0 + (self._count - frequency + 0.5) / (frequency + 0.5))
        postings = _Postings(weights=weights, idf=idf)
        with self._lock:
            if len(self._postings) < TERMS_KEPT_MAX:
                self._postings[term] = postings
        return postings

    def _longer_terms(self, prefix: str) -> list[str]:
        from bisect import bisect_left  # noqa: PLC0415 (only prefix terms need it)

        found = []
        for term in self._vocabulary[bisect_left(self._vocabulary, prefix) :]:
            if not term.startswith(prefix):
                break
            if term != prefix:
                found.append(term)
        return found

    def scores(
        self,
        *,
        terms: Sequence[str] | Sequence[tuple[str, float]],
        matched: Collection[int],
    ) -> dict[int, float]:
        """The BM25F score of each `matched` tool of this collection for `terms` (as `rank`
        takes them); a matched id outside the collection has none."""
        scores = {tool_id: 0.0 for tool_id in matched if tool_id in self.names}
        for item in terms:
            term, term_weight = (item, 1.0) if isinstance(item, str) else item
            postings = self._term_postings(term)
            for tool_id, weight in postings.weights.items():
                if tool_id in scores:
                    scores[tool_id] += term_weight * postings.idf * weight / (K1 + weight)
        return scores

    def rank(
        self,
        *,
        terms: Sequence[str] | Sequence[tuple[str, float]],
        matched: Collection[int],
        limit: int,
    ) -> list[int]:
        """Ids of the `matched` tools of this collection, best first, at most `limit`.

        `terms` are stems, or (stem, weight) pairs (registry.search.text.weighted_query_terms:
        a query's expansions count EXPANSION_WEIGHT times its own words). `matched` is what the
        database found; a matched id outside the collection (a tool the agent may not call) is
        never returned."""
        scores = self.scores(terms=terms, matched=matched)
        # sorted(...)[:limit] without sorting the rest (about 110 matching tools a query).
        return heapq.nsmallest(
            limit, scores, key=lambda tool_id: (-scores[tool_id], self.names[tool_id])
        )
