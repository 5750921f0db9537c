"""Writes registry/search/data/thesaurus.txt.gz, the search's English thesaurus, from WordNet 3.0.

    apt-get install wordnet-base          # Debian's WordNet 3.0 database files
    .venv/bin/python scripts/wordnet_thesaurus.py /usr/share/wordnet

Each line of the output is `stem<TAB>stem stem ...`: a Snowball stem (registry.search.text.stem)
of an English word and, best first, the stems of the words WordNet relates to it: the other
words of its synsets (synonyms), and the words of the synsets its synsets point to as
derivationally related forms (`+`), attributes (`=`) and similar adjectives (`&`). A word's
senses are taken in the order of their tagged frequency (cntlist.rev), a related word ranked by
its best sense's share of the stem's tagged occurrences (add-half smoothed) times its relation's
weight, words of multi-word lemmas (`time_of_day`) at half that; the best 16 kept. The key is
the stem of the lemma and of its regular inflections and WordNet's exceptions (`slowest`,
`children`), so a query's stem finds it.
The relation set was chosen on the labelled set's `tune` tasks (docs/search.md).

WordNet 3.0 is (c) Princeton University, under the licence copied beside the output
(registry/search/data/WORDNET-LICENSE).
"""

from __future__ import annotations

import gzip
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from registry.search.text import STOP_WORDS, stem

OUTPUT = Path(__file__).resolve().parents[1] / "registry" / "search" / "data" / "thesaurus.txt.gz"
PARTS_OF_SPEECH = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}
SENSE_KEY_POS = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
# Pointers followed from a word's synsets, beside the synset's own words (which count 1.0), and
# how much a word found through each counts: derivationally related forms and attributes (`large`
# -> `size`) above similar adjectives (`large` -> `big`, `epic`: a cluster, looser).
RELATIONS = {"+": 0.8, "=": 0.8, "&": 0.6}
MULTI_WORD_FACTOR = 0.5
SMOOTHING = 0.5
# The best this many related stems per stem (the search uses the first few its catalogue has).
MAX_RELATED = 16

Synset = tuple[list[str], list[tuple[str, str, str]]]


def read_synsets(root: Path) -> dict[tuple[str, str], Synset]:
    synsets: dict[tuple[str, str], Synset] = {}
    for name, pos in PARTS_OF_SPEECH.items():
        for line in (root / f"data.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):
                continue
            fields = line.partition(" | ")[0].split()
            count = int(fields[3], 16)
            lemmas = [fields[4 + 2 * i].lower().split("(")[0] for i in range(count)]
            at = 4 + 2 * count
            pointers = []
            for _ in range(int(fields[at])):
                symbol, offset, target_pos = fields[at + 1 : at + 4]
                pointers.append((symbol, "a" if target_pos == "s" else target_pos, offset))
                at += 4
            synsets[(pos, fields[0])] = (lemmas, pointers)
    return synsets


def read_index(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Lemma -> its synsets (part of speech, offset), by part of speech, each part's senses
    numbered from 1 in this order (most frequent first)."""
    index: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name, pos in PARTS_OF_SPEECH.items():
        for line in (root / f"index.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):
                continue
            fields = line.split()
            pointer_count = int(fields[3])
            index[fields[0]].extend((pos, offset) for offset in fields[4 + pointer_count + 2 :])
    return index


def read_tag_counts(root: Path) -> dict[tuple[str, str, int], int]:
    """(lemma, part of speech, sense number) -> how often the sense was tagged in the corpus."""
    counts = {}
    for line in (root / "cntlist.rev").read_text(encoding="latin-1").splitlines():
        key, number, tagged = line.split()
        lemma, _, rest = key.partition("%")
        counts[(lemma, SENSE_KEY_POS[rest[0]], int(number))] = int(tagged)
    return counts


def numbered(senses: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """Each sense's part of speech and number within it."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for pos, _ in senses:
        seen[pos] += 1
        out.append((pos, seen[pos]))
    return out


def inflections(lemma: str, pos: str) -> set[str]:
    forms = {lemma}
    if pos == "n":
        forms |= {lemma + "s", lemma + "es"}
    elif pos == "v":
        forms |= {lemma + "s", lemma + "ed", lemma + "d", lemma + "ing", lemma[:-1] + "ing"}
        forms |= {lemma + lemma[-1] + "ed", lemma + lemma[-1] + "ing"}
    elif pos == "a":
        forms |= {lemma + "er", lemma + "est", lemma + "r", lemma + "st"}
    if lemma.endswith("y") and pos in ("n", "a"):
        forms |= {lemma[:-1] + "ies", lemma[:-1] + "ier", lemma[:-1] + "iest"}
    return forms


def single_word(lemma: str) -> bool:
    return lemma.isalpha() and lemma.isascii()


def thesaurus(root: Path) -> dict[str, list[str]]:
    synsets, index, counts = read_synsets(root), read_index(root), read_tag_counts(root)
    lemmas_by_stem: dict[str, set[str]] = defaultdict(set)
    for lemma, senses in index.items():
        if single_word(lemma):
            for pos in {pos for pos, _ in senses}:
                for form in inflections(lemma, pos):
                    lemmas_by_stem[stem(form)].add(lemma)
    for name in PARTS_OF_SPEECH:
        for line in (root / f"{name}.exc").read_text(encoding="latin-1").splitlines():
            inflected, *bases = line.split()
            if single_word(inflected):
                for base in bases:
                    if base in index:
                        lemmas_by_stem[stem(inflected)].add(base)
    related_by_stem: dict[str, list[str]] = {}
    for key in sorted(lemmas_by_stem):
        scores: dict[str, float] = {}
        lemmas = sorted(lemmas_by_stem[key])
        tagged_by_lemma = {
            lemma: [counts.get((lemma, pos, n), 0) for pos, n in numbered(index[lemma])]
            for lemma in lemmas
        }
        all_tagged = sum(sum(tagged) + SMOOTHING for tagged in tagged_by_lemma.values())
        for lemma in lemmas:
            senses, tagged = index[lemma], tagged_by_lemma[lemma]
            # The lemma's share of the stem's tagged occurrences (`clocks`, a plant, is rarer
            # than `clock`), then each sense's share of the lemma's.
            lemma_share = (sum(tagged) + SMOOTHING) / all_tagged
            total = sum(tagged) + SMOOTHING * len(senses)
            for sense, count in zip(senses, tagged, strict=True):
                share = lemma_share * (count + SMOOTHING) / total
                words, pointers = synsets[sense]
                found = [(word, 1.0) for word in words]
                for symbol, pos, offset in pointers:
                    if symbol in RELATIONS:
                        weight = RELATIONS[symbol]
                        found.extend((word, weight) for word in synsets[(pos, offset)][0])
                for lemma_found, relation in found:
                    parts = [
                        part
                        for part in lemma_found.replace("-", "_").split("_")
                        if len(part) > 1 and part.isalpha() and part not in STOP_WORDS
                    ]
                    weight = share * relation * (MULTI_WORD_FACTOR if len(parts) > 1 else 1.0)
                    for part in parts:
                        related = stem(part)
                        if related != key and scores.get(related, 0.0) < weight:
                            scores[related] = weight
        if scores:
            ranked = sorted(scores, key=lambda term: (-scores[term], term))
            related_by_stem[key] = ranked[:MAX_RELATED]
    return related_by_stem


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/wordnet")
    related_by_stem = thesaurus(root)
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{key}\t{' '.join(related)}\n" for key, related in related_by_stem.items())
    # mtime 0: the same WordNet gives the same bytes.
    OUTPUT.write_bytes(gzip.compress(text.encode("ascii"), compresslevel=9, mtime=0))
    print(f"Wrote {OUTPUT} ({len(related_by_stem)} stems).")


if __name__ == "__main__":
    main()
