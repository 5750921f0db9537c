"""Namespaced tool names: legal in every format, stable, collision-free, reversible when plain."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from registry.catalogue.naming import namespaced_tool_name, plain_name_parts

LEGAL = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
slugs = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,79}", fullmatch=True)
tool_names = st.text(min_size=1, max_size=200).filter(lambda s: s.strip() == s and s)


def test_it_joins_the_server_slug_and_the_tool_name():
    assert namespaced_tool_name("files", "read_file") == "files__read_file"
    assert plain_name_parts("files__read_file") == ("files", "read_file")


def test_it_hashes_names_that_are_too_long_or_illegal():
    long_name = namespaced_tool_name("files", "x" * 80)
    dotted = namespaced_tool_name("files", "read.file")

    assert len(long_name) == 64
    assert re.search(r"_[0-9a-f]{12}$", long_name)
    assert dotted.startswith("files__read_file_")
    assert plain_name_parts(dotted) is None


def test_a_slug_with_a_double_underscore_cannot_pose_as_another_server():
    assert namespaced_tool_name("a__b", "c") != namespaced_tool_name("a", "b__c")


@given(slug=slugs, tool=tool_names)
def test_every_name_is_legal_and_stable(slug, tool):
    name = namespaced_tool_name(slug, tool)

    assert LEGAL.match(name)
    assert namespaced_tool_name(slug, tool) == name
    parts = plain_name_parts(name)
    assert parts is None or parts == (slug, tool)


@given(st.lists(st.tuples(slugs, tool_names), min_size=2, max_size=30, unique=True))
def test_distinct_tools_get_distinct_names(pairs):
    names = {namespaced_tool_name(slug, tool) for slug, tool in pairs}

    assert len(names) == len(pairs)
