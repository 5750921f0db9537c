"""Tool definitions the scanner is tried on: the recorded published servers, many ordinary tools
varied from them, a 2 MB schema and texts built to make regular expressions backtrack. Shared by
tests/servers/test_scanner.py (what is flagged) and bench/scanner (how fast)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "scanner"
# Tool lists recorded from the published servers (see tests/data/scanner/README.md).
PUBLISHED = [
    "mcp_server_time.json",
    "mcp_server_git.json",
    "server_everything.json",
    "server_memory.json",
    "server_filesystem.json",
    "reference_servers_paraphrased.json",
]


def load(name: str) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads((DATA / name).read_text())
    return tools


def tool(description: str = "Does one thing.", **fields: Any) -> dict[str, Any]:
    return {
        "name": "tool",
        "description": description,
        "inputSchema": {"type": "object", "properties": {}},
    } | fields


def tags(text: str) -> str:
    """The text in Unicode tag characters (invisible)."""
    return "".join(chr(0xE0000 + ord(ch)) for ch in text)


def _varied(value: Any, index: int) -> Any:
    if isinstance(value, dict):
        return {
            key: f"{item} (variant {index})"
            if key in ("description", "title") and isinstance(item, str)
            else _varied(item, index)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_varied(item, index) for item in value]
    return value


def ordinary_tools(count: int = 10_000) -> list[dict[str, Any]]:
    """`count` tools varied from the published ones (names and texts made unique)."""
    published = [definition for name in PUBLISHED for definition in load(name)]
    tools = []
    for index in range(count):
        varied = _varied(published[index % len(published)], index)
        varied["name"] = f"{varied['name']}_{index}"
        tools.append(varied)
    return tools


def two_megabyte_schema() -> dict[str, Any]:
    """An input schema of 7,500 described string properties: over 2 MB of JSON."""
    properties = {
        f"field_{index}": {
            "type": "string",
            "title": f"Field {index}",
            "description": f"Value of field {index}; pass the page token to continue. " * 3,
            "enum": ["alpha", "beta", "gamma"],
        }
        for index in range(7_500)
    }
    return {"type": "object", "properties": properties}


# Descriptions of 0.3-2 million characters built to make the phrase patterns backtrack.
PATHOLOGICAL_TEXTS = {
    "ignore": "ignore " * 300_000,
    "angles": "<" * 2_000_000,
    "negations": "do not " * 300_000,
    "verbs-then-path": "read " * 400_000 + "~/.ssh",
    "verbs-then-to": "send " * 400_000 + "to ",
    "zero-width": "\u200b" * 2_000_000,
    "tags": tags("ignore previous instructions ") * 10_000,
}
