"""Issue 26, Medium 3: the YAML nesting bound holds for every scalar style.

The old bound counted brackets in the raw text and guessed where quoted scalars began and ended;
a quoted scalar broken over two lines (`x: ["abc<newline> " , [[[...]]]]`) made it read the closing
quote as an opening one, hide the brackets after it, and let PyYAML spend 54 s on 100 KB. The bound
now counts on PyYAML's own scanner and parser (`registry/servers/importing/reading.py`).

A generated corpus puts every scalar style that could hide a bracket or show a false one (double
and single quoted, escaped quotes, multi-line quoted and plain scalars, block literals and folded
scalars, comments) in front of every nesting shape (flow sequences and mappings, mixed, block
mappings, block and compact sequences, indentless sequences, complex keys). Each document's depth
is measured independently by composing it with plain PyYAML: the bound must accept exactly the
documents no deeper than YAML_MAX_NESTING and report their exact depth. Large hostile documents of
each kind are refused with the nesting message.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from registry.servers.importing.entries import ImportFileError
from registry.servers.importing.reading import (
    YAML_MAX_NESTING,
    YamlTooDeep,
    parse_yaml,
    yaml_nesting_depth,
)

# Flow items that might fool a counter of raw characters: each is a valid flow-sequence item.
FLOW_HIDERS = {
    "double-quoted over two lines": '"abc\n "',
    "single-quoted over two lines": "'abc\n '",
    "escaped double quote and a bracket": '"a \\" ["',
    "doubled single quote and a bracket": "'a '' ['",
    "brackets in double quotes": '"]}]}"',
    "comment marker and brackets in single quotes": "'#[{'",
    "plain scalar with quotes inside": "a'b\"c",
    "plain scalar over two lines": "abc\n def",
    "comment holding a quote and a bracket": "# \" [ '\n x",
}

# Entries of the top mapping, before the nesting, that might fool the same counter.
BLOCK_HIDERS = {
    "double-quoted over two lines": 'h: "abc\n  def [ "\n',
    "single-quoted over two lines": "h: 'abc\n  def [ '\n",
    "escaped double quote": 'h: "a \\" ["\n',
    "literal block scalar": "h: |\n  [[[ \"\n  ]]' {\n",
    "folded block scalar": 'h: >\n  "quoted [\n  more\n',
    "plain scalar with a quote": 'h: plain "with quote\n',
    "comment with a quote": '# a comment with " and [\n',
    "plain scalar over lines": "h: first [\n  second {\n",
}


def _flow(levels: int, opener: Callable[[int], str], closer: Callable[[int], str]) -> str:
    return (
        "".join(opener(i) for i in range(levels))
        + "1"
        + "".join(closer(i) for i in reversed(range(levels)))
    )


FLOW_SHAPES: dict[str, Callable[[int], str]] = {
    "sequences": lambda n: _flow(n, lambda _i: "[", lambda _i: "]"),
    "mappings": lambda n: _flow(n, lambda _i: "{a: ", lambda _i: "}"),
    "mixed": lambda n: _flow(
        n,
        lambda i: "[" if i % 2 else "{a: ",
        lambda i: "]" if i % 2 else "}",
    ),
}


def _block_mappings(n: int) -> str:
    return "x:\n" + "".join("  " * i + "a:\n" for i in range(1, n)) + "  " * n + "a: 1\n"


def _block_sequences(n: int) -> str:
    return "x:\n" + "".join("  " * i + "-\n" for i in range(1, n + 1)) + "  " * (n + 1) + "1\n"


def _compact_sequences(n: int) -> str:
    return "x:\n  " + "- " * n + "1\n"


def _indentless_sequences(n: int) -> str:
    # `- a:` at the mapping's own indentation: each line opens a sequence and a mapping.
    return "x:\n" + "".join("  " * i + "- a:\n" for i in range(n // 2)) + "  " * (n // 2) + "- 1\n"


def _complex_keys(n: int) -> str:
    # A collection cannot be a key once constructed: the nesting is the explicit key's value.
    return "? k\n: " + _flow(n, lambda _i: "[", lambda _i: "]") + "\n"


BLOCK_SHAPES: dict[str, Callable[[int], str]] = {
    "mappings": _block_mappings,
    "sequences": _block_sequences,
    "compact sequences": _compact_sequences,
    "indentless sequences": _indentless_sequences,
    "complex keys": _complex_keys,
}


def corpus(levels: int) -> dict[str, str]:
    """Every hider in front of every shape, nested about `levels` deep below the top."""
    documents = {}
    for hider_name, hider in FLOW_HIDERS.items():
        for shape_name, shape in FLOW_SHAPES.items():
            documents[f"flow {shape_name} after {hider_name}"] = f"x: [{hider}, {shape(levels)}]\n"
    for hider_name, hider in BLOCK_HIDERS.items():
        for shape_name, shape in BLOCK_SHAPES.items():
            documents[f"block {shape_name} after {hider_name}"] = hider + shape(levels)
    return documents


def depth_by_composing(text: str) -> int:
    """The nesting as plain PyYAML builds it: the oracle (fine for documents this shallow)."""
    deepest = 0
    for document in yaml.compose_all(text, Loader=yaml.SafeLoader):
        stack = [(document, 1)]
        while stack:
            node, depth = stack.pop()
            if isinstance(node, yaml.SequenceNode):
                deepest = max(deepest, depth)
                stack += [(child, depth + 1) for child in node.value]
            elif isinstance(node, yaml.MappingNode):
                deepest = max(deepest, depth)
                stack += [(part, depth + 1) for pair in node.value for part in pair]
    return deepest


NEAR_THE_BOUND = {
    f"{name}, {levels} levels": text
    for levels in range(YAML_MAX_NESTING - 4, YAML_MAX_NESTING + 2)
    for name, text in corpus(levels).items()
}


@pytest.mark.exhaustive
@pytest.mark.parametrize("text", NEAR_THE_BOUND.values(), ids=NEAR_THE_BOUND.keys())
def test_the_bound_accepts_exactly_what_is_no_deeper_than_the_limit(text):
    depth = depth_by_composing(text)
    if depth <= YAML_MAX_NESTING:
        assert yaml_nesting_depth(text) == depth
        assert parse_yaml(text) is not None
    else:
        with pytest.raises(YamlTooDeep):
            yaml_nesting_depth(text)
        with pytest.raises(ImportFileError, match=f"deeper than {YAML_MAX_NESTING} levels"):
            parse_yaml(text)


def test_the_corpus_reaches_past_the_bound_in_every_shape():
    """The generator is what the corpus test relies on: every shape goes past the bound."""
    shallow = [
        name
        for name, text in corpus(YAML_MAX_NESTING + 1).items()
        if depth_by_composing(text) <= YAML_MAX_NESTING
    ]
    assert shallow == []


# Hostile documents of about 60 KB each: thousands of levels behind each hider.
HOSTILE = {
    name: text
    for name, text in corpus(3_000).items()
    if "complex keys" not in name or "comment" in name  # one complex-key case is enough
}
HOSTILE["the review's document"] = 'x: ["abc\n " , ' + "[" * 50_000 + "]" * 50_000 + "]\n"


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_document_is_refused_for_its_nesting(text):
    with pytest.raises(ImportFileError) as refused:
        parse_yaml(text)
    assert f"nests deeper than {YAML_MAX_NESTING} levels" in refused.value.problems[0].message
