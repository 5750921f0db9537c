"""Namespaced tool names: legal in every output format, stable, collision-free, reversible.

Every format Toolroom serves accepts `^[a-zA-Z0-9_-]{1,64}$` (OpenAI and Anthropic function
names; MCP names allow more). A tool `read_file` of the server `files` becomes `files__read_file`.
That plain form is used when it is legal as it is, fits in 64 characters, the slug holds no
`__` and does not start or end with `_` (so the first `__` is always the separator), and the
name does not already end like a hashed name. Otherwise the name is sanitised (illegal characters
become `_`), cut, and given `_` plus the first 12 hex digits of SHA-256(`<slug>/<tool>`): plain
names never end in `_<12 hex>`, hashed ones always do, so the two kinds cannot collide, and two
hashed names collide only if 48 bits of SHA-256 do.

The name depends on the server's slug and the tool's name only: nothing else renames a tool.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 64
SEPARATOR = "__"
HASH_CHARS = 12
_LEGAL = re.compile(r"^[a-zA-Z0-9_-]+$")
_ILLEGAL_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_HASHED_TAIL = re.compile(r"_[0-9a-f]{12}$")


def _is_plain(server_slug: str, tool_name: str, joined: str) -> bool:
    return (
        bool(_LEGAL.match(server_slug))
        and bool(_LEGAL.match(tool_name))
        and SEPARATOR not in server_slug
        and not server_slug.startswith("_")
        and not server_slug.endswith("_")
        and len(joined) <= MAX_NAME_LENGTH
        and not _HASHED_TAIL.search(joined)
    )


def namespaced_tool_name(server_slug: str, tool_name: str) -> str:
    """The name agents see for `tool_name` of the server `server_slug`."""
    joined = f"{server_slug}{SEPARATOR}{tool_name}"
    if _is_plain(server_slug, tool_name, joined):
        return joined
    digest = hashlib.sha256(f"{server_slug}/{tool_name}".encode()).hexdigest()[:HASH_CHARS]
    base = _ILLEGAL_CHAR.sub("_", joined)[: MAX_NAME_LENGTH - HASH_CHARS - 1]
    return f"{base}_{digest}"


def plain_name_parts(name: str) -> tuple[str, str] | None:
    """(server slug, tool name) of a plain namespaced name, None for a hashed one.

    A hashed name can be resolved only against a catalogue: see
    `registry.catalogue.selectors.catalogue_resolve_tool`.
    """
    if _HASHED_TAIL.search(name) or SEPARATOR not in name:
        return None
    slug, _, tool = name.partition(SEPARATOR)
    if not tool or namespaced_tool_name(slug, tool) != name:
        return None
    return slug, tool
