"""The search's English thesaurus (registry.search.thesaurus) and how the ranking uses it
(registry.search.ranking.SearchModel.expanded): no database needed."""

from __future__ import annotations

import gzip

from registry.search import ranking
from registry.search.index import document_fields
from registry.search.ranking import (
    THESAURUS_MAX_TERMS,
    THESAURUS_TERMS_PER_TERM,
    THESAURUS_WEIGHT,
    SearchDocument,
    SearchModel,
)
from registry.search.text import stem, weighted_query_terms
from registry.search.thesaurus import THESAURUS_PATH, Thesaurus, thesaurus


def test_a_lookup_finds_its_line_and_nothing_else():
    source = Thesaurus(b"abc\tx y\nabd\tz\nb\tw\n")
    assert len(source) == 3
    assert source.related("abc") == ("x", "y")
    assert source.related("abd") == ("z",)
    assert source.related("b") == ("w",)
    for missing in ("ab", "abcd", "a", "c", "", "\u00e9t\u00e9"):
        assert source.related(missing) == (), missing
    assert Thesaurus(b"").related("abc") == ()
    assert Thesaurus(b"k\tv").related("k") == ("v",)  # no final newline


def test_the_shipped_thesaurus_relates_english_words_by_their_stems():
    lines = gzip.decompress(THESAURUS_PATH.read_bytes()).decode("ascii").splitlines()
    keys = [line.partition("\t")[0] for line in lines]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys) > 100_000
    source = thesaurus()
    assert "licens" in source.related(stem("licence"))  # British and American spelling
    assert "time" in source.related(stem("clock"))  # a synonym (to clock = to time)
    assert "size" in source.related(stem("large"))  # an attribute
    assert "slow" in source.related(stem("slowest"))  # an inflection finds its lemma
    assert source.related("qzxv") == ()


def _model(*tools: tuple[str, str]) -> SearchModel:
    return SearchModel(
        [
            SearchDocument(
                tool_id=number,
                name=name,
                fields=document_fields(
                    name=name,
                    title=None,
                    annotations=None,
                    input_schema=None,
                    description=description,
                    server_name="Server",
                    server_slug="server",
                    category_name=None,
                    category_slug=None,
                ),
            )
            for number, (name, description) in enumerate(tools, start=1)
        ]
    )


SOURCE = Thesaurus(b"clock\ttime timekeep watch hour\nshow\tdisplay\nsydney\tcity\nzebra\tstripe\n")


def test_only_related_stems_the_collection_holds_are_added():
    model = _model(("get_time", "Get the current time."), ("display", "Display a page."))
    assert model.expanded([("clock", 1.0)], source=SOURCE) == [
        ("clock", 1.0),
        ("time", THESAURUS_WEIGHT),
    ]
    # No tool says `stripe`: nothing is added for `zebra`.
    assert model.expanded([("zebra", 1.0)], source=SOURCE) == [("zebra", 1.0)]
    without_time = _model(("display", "Display a page."))
    assert without_time.expanded([("clock", 1.0)], source=SOURCE) == [("clock", 1.0)]


def test_a_term_the_collection_holds_is_not_expanded():
    model = _model(("show_status", "Show the status."), ("display", "Display a page."))
    assert model.expanded([("show", 1.0)], source=SOURCE) == [("show", 1.0)]
    # Held as the prefix of a longer term (the database matches it so): not expanded either.
    by_prefix = _model(("clockwork", "Wind the clockwork."), ("get_time", "Get the time."))
    assert by_prefix.expanded([("clock", 1.0)], source=SOURCE) == [("clock", 1.0)]


def test_at_most_so_many_stems_a_term_and_a_query():
    many = Thesaurus(
        b"aaa\t" + b" ".join(f"w{i}".encode() for i in range(20)) + b"\n"
        b"bbb\t" + b" ".join(f"v{i}".encode() for i in range(20)) + b"\n"
    )
    words = " ".join([f"w{i}" for i in range(20)] + [f"v{i}" for i in range(20)])
    model = _model(("everything", words))
    one = model.expanded([("aaa", 1.0)], source=many)
    assert [term for term, _ in one[1:]] == [f"w{i}" for i in range(THESAURUS_TERMS_PER_TERM)]
    letters = [chr(ord("a") + i) * 3 for i in range(THESAURUS_MAX_TERMS)]
    lines = b"".join(f"{letter}\tw{i} w{i + 10}\n".encode() for i, letter in enumerate(letters))
    source = Thesaurus(lines)
    added = model.expanded([(letter, 1.0) for letter in [*letters, "zzz"]], source=source)
    assert len(added) - (THESAURUS_MAX_TERMS + 1) == THESAURUS_MAX_TERMS


def test_a_query_word_a_tool_holds_outranks_a_thesaurus_term():
    # Both tools alike but for one word: the query's own word beats the word found for `clock`.
    model = _model(
        ("get_time", "Get the current time of a city."),
        ("show_city", "Show the current state of a city."),
    )
    weighted = model.expanded(weighted_query_terms("clock show"), source=SOURCE)
    assert ("time", THESAURUS_WEIGHT) in weighted
    assert THESAURUS_WEIGHT < 1.0
    assert [model.names[i] for i in model.rank(terms=weighted, matched={1, 2}, limit=2)] == [
        "show_city",
        "get_time",
    ]
    # Without the query's own word, the thesaurus's term finds its tool.
    alone = model.expanded(weighted_query_terms("clock"), source=SOURCE)
    assert [model.names[i] for i in model.rank(terms=alone, matched={1}, limit=2)] == ["get_time"]


def test_what_a_model_keeps_of_agents_terms_is_bounded(monkeypatch):
    """Agents choose the terms: a model kept per catalogue version must not grow without end
    with every new word it is asked, and answers stay the same past the bound."""
    monkeypatch.setattr(ranking, "TERMS_KEPT_MAX", 3)
    model = _model(("get_time", "Get the current time."), ("display", "Display a page."))
    for word in ("alpha", "bravo", "charlie", "delta", "echo"):
        assert model.expanded([(word, 1.0)], source=SOURCE) == [(word, 1.0)]
        assert model.rank(terms=[word], matched={1, 2}, limit=5) == [2, 1]  # ties: by name
    assert model.expanded([("clock", 1.0)], source=SOURCE)[1] == ("time", THESAURUS_WEIGHT)
    assert model.rank(terms=["time"], matched={1, 2}, limit=5)[0] == 1
    assert len(model._related) == 3
    assert len(model._postings) == 3
