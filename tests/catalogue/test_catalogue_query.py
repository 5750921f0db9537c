"""The catalogue's one parameter spec: the fast path's plain reading of a query string
(`catalogue_query_plain`) is the view's (`CatalogueQuerySerializer`) wherever it answers at all."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.http import QueryDict
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.api.catalogue_query import (
    CatalogueQuerySerializer,
    catalogue_query,
    catalogue_query_plain,
)
from registry.catalogue.search import SearchRequest

NAMES = ["format", "category", "q", "limit", "page"]
VALUES = [
    "",
    "native",
    "mcp",
    "openai",
    "anthropic",
    "yaml",
    "files",
    "bad slug",
    "x" * 61,
    "read files",
    "  read  ",
    "+++",
    "0",
    "1",
    "03",
    "3.0",
    "50",
    "51",
    "-2",
    "x" * 501,
    "%00",
    "%FF",
    "é",
]


def _view_reads(raw: str):
    serializer = CatalogueQuerySerializer(data=QueryDict(raw))
    if not serializer.is_valid():
        return None
    return catalogue_query(serializer.validated_data)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES) | st.text(max_size=8)),
        max_size=4,
    )
)
def test_a_plain_query_reads_as_the_view_reads_it(pairs):
    raw = "&".join(
        f"{name}={value if value.startswith('%') else quote(value)}" for name, value in pairs
    )

    plain = catalogue_query_plain(raw.encode())

    if plain is not None:
        assert plain == _view_reads(raw), raw


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ("native", None, None)),
        ("format=mcp&category=files", ("mcp", "files", None)),
        ("q=read+files", ("native", None, SearchRequest(text="read files", limit=10))),
        ("q=%20read%20&limit=5&format=openai", ("openai", None, SearchRequest("read", 5))),
    ],
)
def test_the_usual_queries_are_plain(raw, expected):
    plain = catalogue_query_plain(raw.encode())

    assert plain is not None
    assert (plain.fmt, plain.category, plain.search) == expected
    assert plain == _view_reads(raw)


@pytest.mark.parametrize(
    "raw", ["q=", "limit=3", "q=a&limit=03", "q=a&limit=3.0", "format=mcp&format=native", "page=2"]
)
def test_what_the_view_reads_otherwise_or_refuses_is_not_plain(raw):
    assert catalogue_query_plain(raw.encode()) is None
