"""Turning uploaded bytes into data: the size limit, text decoding, JSON(C) and safe YAML parsing,
and telling which of the three formats a file is.

Everything here refuses with an `ImportFileError` whose message an admin can act on: the size
and the limit, the line and column of a syntax error, the anchor that YAML may not use.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Hashable
from typing import IO, Any

import yaml
from django.conf import settings
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from registry.servers.importing.entries import ImportFileError, ImportProblem

FORMAT_AUTO = "auto"
FORMAT_MCP_JSON = "mcp-json"
FORMAT_SERVER_JSON = "server-json"
FORMAT_YAML = "yaml"
FORMATS = (FORMAT_AUTO, FORMAT_MCP_JSON, FORMAT_SERVER_JSON, FORMAT_YAML)
FORMAT_LABELS = {
    FORMAT_AUTO: "Detect from the file",
    FORMAT_MCP_JSON: "mcp.json (Claude Desktop, Claude Code, VS Code, Cursor)",
    FORMAT_SERVER_JSON: "server.json (official MCP registry)",
    FORMAT_YAML: "Toolroom YAML",
}


def _refuse(message: str) -> ImportFileError:
    return ImportFileError([ImportProblem(None, None, message)])


def describe_size(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB ({size:,} bytes)"
    if size >= 1024:
        return f"{size / 1024:.1f} KB ({size:,} bytes)"
    return f"{size:,} bytes"


def import_max_bytes() -> int:
    return int(settings.TOOLROOM_IMPORT_MAX_BYTES)


def check_size(size: int, *, at_least: bool = False) -> None:
    """Refuse a file over TOOLROOM_IMPORT_MAX_BYTES before anything parses it.

    `at_least`: the size is only known to exceed the limit (a stream read up to limit + 1).
    """
    limit = import_max_bytes()
    if size <= limit:
        return
    shown = f"more than {describe_size(limit)}" if at_least else describe_size(size)
    raise _refuse(
        f"The file is {shown}; imports are limited to {describe_size(limit)} "
        "(TOOLROOM_IMPORT_MAX_BYTES)."
    )


def read_limited(stream: IO[bytes], *, size: int | None = None) -> bytes:
    """Read an import file without ever holding more than the limit (plus one byte) in memory.

    `size` is the size when the caller knows it (a regular file, an upload): a file that is too
    large is refused before a byte is read.
    """
    if size is not None:
        check_size(size)
    limit = import_max_bytes()
    content = stream.read(limit + 1)
    if len(content) > limit:
        check_size(len(content), at_least=True)
    return content


def decode_text(content: bytes) -> str:
    if content.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return content.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise _refuse(f"The file is not valid UTF-16 text (byte {exc.start}).") from exc
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _refuse(
            f"The file is not UTF-8 text (invalid byte at offset {exc.start}); save it as UTF-8."
        ) from exc
    if "\x00" in text:
        raise _refuse("The file contains NUL characters: it looks like a binary file, not text.")
    if not text.strip():
        raise _refuse("The file is empty.")
    return text


# --- JSON (with the comments and trailing commas VS Code's mcp.json allows) --------------------


def strip_json_comments(text: str) -> str:
    """Blank out // and /* */ comments and trailing commas outside strings (JSONC, as VS Code
    writes mcp.json), keeping every other character where it was so error positions stay true."""
    out = list(text)
    i, length = 0, len(text)
    in_string = False
    pending_comma: int | None = None
    while i < length:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = length if end == -1 else end
            for j in range(i, end):
                out[j] = " "
            i = end
            continue
        if ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = length if end == -1 else end + 2
            for j in range(i, end):
                if out[j] != "\n":
                    out[j] = " "
            i = end
            continue
        if ch.isspace():
            i += 1
            continue
        if ch in "}]" and pending_comma is not None:
            out[pending_comma] = " "
        pending_comma = i if ch == "," else None
        if ch == '"':
            in_string = True
        i += 1
    return "".join(out)


def parse_json(text: str) -> tuple[Any, list[ImportProblem]]:
    """Parse JSON (or JSONC); duplicate keys, which JSON parsers silently collapse, are problems."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                duplicates.append(key)
            result[key] = value
        return result

    try:
        data = json.loads(strip_json_comments(text), object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise _refuse(
            f"The file is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from exc
    except RecursionError as exc:
        raise _refuse("The file is not valid JSON: it is nested too deeply.") from exc
    problems = [
        ImportProblem(
            key,
            None,
            f"The key {key!r} appears twice in one object; the second would silently "
            "replace the first. Remove or rename one of them.",
        )
        for key in dict.fromkeys(duplicates)
    ]
    return data, problems


# --- YAML: safe_load semantics, no anchors or aliases, no duplicate keys -----------------------


# Deeper than any real configuration. PyYAML's pure-Python scanner keeps one possible simple key
# per open flow collection and walks them all for every token, so its time grows with the square
# of the nesting (a 100 KB `[[[[...` took 54 s): the nesting is bounded inside the scanner itself.
YAML_MAX_NESTING = 64


class YamlTooDeep(yaml.YAMLError):
    """The document nests deeper than the bound; `mark` is where the scanner or parser was."""

    def __init__(self, mark: Any) -> None:
        super().__init__(f"nested deeper than {YAML_MAX_NESTING} levels")
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose scanner stops as soon as more than YAML_MAX_NESTING collections are open.

    The count is PyYAML's own: its flow level (open `[` and `{`) plus its block indentation stack
    (one entry per open block mapping or sequence), checked whenever either grows. Quotes,
    escapes, comments, block scalars and multi-line scalars are the scanner's business, so no
    scalar style can hide a bracket from the count or show it one. Each token then costs the
    scanner at most YAML_MAX_NESTING steps. The count never exceeds the number of collections
    open in the document (an indentless sequence opens no indentation), so the parser's events
    (`_checked_events`) decide the exact bound."""

    def _check_nesting(self) -> None:
        if self.flow_level + len(self.indents) > YAML_MAX_NESTING:
            raise YamlTooDeep(self.get_mark())

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        super().fetch_flow_collection_start(TokenClass)
        self._check_nesting()

    def add_indent(self, column: int) -> bool:
        added = bool(super().add_indent(column))
        if added:
            self._check_nesting()
        return added


class _StrictSafeLoader(_BoundedLoader):
    """The bounded SafeLoader, refusing duplicate mapping keys instead of keeping the last one."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Any] = set()
        for key_node, _value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise ConstructorError(
                        None,
                        None,
                        f"the key {key!r} appears twice in one mapping",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_position(mark: Any) -> str:
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"


_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _checked_events(text: str) -> int:
    """One pass over the parser's events, on the bounded scanner: refuses anchors and aliases
    (an alias bomb expands only when constructed, so they are refused before anything is built)
    and nesting deeper than YAML_MAX_NESTING (YamlTooDeep). Returns the deepest nesting."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=_BoundedLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _refuse(
                "YAML anchors and aliases (&name, *name) are not accepted in import files"
                f"{_yaml_position(event.start_mark)}; write each value out in full."
            )
        if isinstance(event, _OPENS):
            depth += 1
            if depth > YAML_MAX_NESTING:
                raise YamlTooDeep(event.start_mark)
            deepest = max(deepest, depth)
        elif isinstance(event, _CLOSES):
            depth -= 1
    return deepest


def yaml_nesting_depth(text: str) -> int:
    """How deep the collections of a YAML text nest; YamlTooDeep past YAML_MAX_NESTING."""
    return _checked_events(text)


def parse_yaml(text: str) -> Any:
    try:
        _checked_events(text)
        return yaml.load(text, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlTooDeep as exc:
        raise _refuse(
            f"The file nests deeper than {YAML_MAX_NESTING} levels"
            f"{_yaml_position(exc.mark)}; import files are never that deep."
        ) from exc
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "syntax error"
        raise _refuse(
            f"The file is not valid YAML: {problem}{_yaml_position(exc.problem_mark)}."
        ) from exc
    except yaml.YAMLError as exc:
        raise _refuse(f"The file is not valid YAML: {exc}.") from exc
    except RecursionError as exc:
        raise _refuse("The file is not valid YAML: it is nested too deeply.") from exc


# --- Which format is it? --------------------------------------------------------------------


def looks_like_json(text: str, filename: str | None) -> bool:
    name = (filename or "").lower()
    if name.endswith((".yaml", ".yml")):
        return False
    if name.endswith((".json", ".jsonc")):
        return True
    return text.lstrip().startswith(("{", "["))


def detect_format(data: Any) -> str | None:
    """The format a parsed document is in, from its top-level keys; None when it is unclear."""
    if not isinstance(data, dict):
        return None
    if "mcp_servers" in data:
        return FORMAT_YAML
    if "mcpServers" in data or isinstance(data.get("servers"), dict):
        return FORMAT_MCP_JSON
    if isinstance(data.get("servers"), list):
        return FORMAT_SERVER_JSON
    if "name" in data and ("packages" in data or "remotes" in data or "$schema" in data):
        return FORMAT_SERVER_JSON
    return None


UNKNOWN_FORMAT_MESSAGE = (
    "Cannot tell what kind of file this is. Expected an mcp.json (a `mcpServers` or `servers` "
    "object), an official registry server.json (`name` with `packages` or `remotes`, or a "
    "registry `servers` list) or a Toolroom YAML file (`mcp_servers`). Choose the format "
    "explicitly if it is one of these."
)


def load_document(
    *, content: bytes, filename: str | None, format: str
) -> tuple[str, Any, list[ImportProblem]]:
    """Decode and parse `content`; return (format, data, problems found while parsing)."""
    if format not in FORMATS:
        raise _refuse(f"Unknown format {format!r}; choose one of {', '.join(FORMATS)}.")
    check_size(len(content))
    text = decode_text(content)
    problems: list[ImportProblem] = []
    if format == FORMAT_YAML or (format == FORMAT_AUTO and not looks_like_json(text, filename)):
        data = parse_yaml(text)
    else:
        data, problems = parse_json(text)
    if format == FORMAT_AUTO:
        detected = detect_format(data)
        if detected is None:
            raise _refuse(UNKNOWN_FORMAT_MESSAGE)
        format = detected
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise _refuse(
            f"The file holds {kind} at the top level; a {FORMAT_LABELS[format]} file "
            "is an object (a mapping of keys to values)."
        )
    return format, data, problems
