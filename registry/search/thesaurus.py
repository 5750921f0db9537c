"""The search's English thesaurus: the stems of the words WordNet 3.0 relates to a word's stem.

`registry/search/data/thesaurus.txt.gz` (written by scripts/wordnet_thesaurus.py from Debian's
`wordnet-base`; WordNet's licence is beside it) holds one line per stem, `stem<TAB>related ...`,
sorted by stem, the related stems best first (synonyms, then derivations and attributes, then
similar adjectives, each ranked by how often its sense is the word's). The file is read once per
process on first use and kept as one bytes object with the offsets of its lines (about 10 MB):
a look-up is a binary search, so no per-stem Python objects are made.
"""

from __future__ import annotations

import gzip
import threading
from array import array
from itertools import accumulate
from pathlib import Path

THESAURUS_PATH = Path(__file__).resolve().parent / "data" / "thesaurus.txt.gz"


class Thesaurus:
    """Sorted `stem<TAB>related ...` lines, looked up by binary search."""

    def __init__(self, text: bytes) -> None:
        self._text = text
        lines = text.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        # Where each line starts: 0, then after each line but the last.
        starts = accumulate((len(line) + 1 for line in lines[:-1]), initial=0)
        self._starts = array("I", starts if lines else ())

    def __len__(self) -> int:
        return len(self._starts)

    def _key(self, index: int) -> bytes:
        start = self._starts[index]
        return self._text[start : self._text.index(b"\t", start)]

    def related(self, term: str) -> tuple[str, ...]:
        """The stems related to `term` (a stem), best first; () when WordNet has no such word."""
        key = term.encode("ascii", "ignore")
        if not key or key != term.encode("utf-8"):
            return ()
        low, high = 0, len(self._starts)
        while low < high:
            middle = (low + high) // 2
            if self._key(middle) < key:
                low = middle + 1
            else:
                high = middle
        if low == len(self._starts) or self._key(low) != key:
            return ()
        start = self._starts[low] + len(key) + 1
        end = self._text.find(b"\n", start)
        line = self._text[start : end if end != -1 else len(self._text)]
        return tuple(line.decode("ascii").split())


_loaded: Thesaurus | None = None
_load_lock = threading.Lock()


def thesaurus() -> Thesaurus:
    """The thesaurus of `THESAURUS_PATH`, read on first use (about 0.2 s) and kept."""
    global _loaded  # noqa: PLW0603 (one per process, read lazily)
    if _loaded is None:
        with _load_lock:
            if _loaded is None:
                _loaded = Thesaurus(gzip.decompress(THESAURUS_PATH.read_bytes()))
    return _loaded
