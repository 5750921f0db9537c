"""Namespaced names: tools' and prompts' (legal in every output format, stable, collision-free,
reversible) and resources' URIs.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote

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


# A server's resource, as agents see it through the gateway: toolroom://<slug>/<its URI, encoded>.
URI_SCHEME = "toolroom://"
# A URI template's `{expression}` (RFC 6570).
EXPRESSION = re.compile(r"\{[^{}]*\}")


def namespaced_uri(slug: str, uri: str) -> str:
    return f"{URI_SCHEME}{slug}/{quote(uri, safe='')}"


def namespaced_uri_template(slug: str, template: str) -> str:
    """The template under the gateway's scheme: literal parts percent-encoded like a concrete
    URI, `{expressions}` kept for the client to expand."""
    parts: list[str] = []
    last = 0
    for match in EXPRESSION.finditer(template):
        parts.append(quote(template[last : match.start()], safe=""))
        parts.append(match.group(0))
        last = match.end()
    parts.append(quote(template[last:], safe=""))
    return f"{URI_SCHEME}{slug}/{''.join(parts)}"


def resource_uri_parts(uri: str) -> tuple[str, str] | None:
    """(slug, the server's URI) of a namespaced resource URI, else None."""
    if not uri.startswith(URI_SCHEME):
        return None
    slug, _, encoded = uri[len(URI_SCHEME) :].partition("/")
    return (slug, unquote(encoded)) if slug and encoded else None
