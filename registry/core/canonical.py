"""Canonical JSON and the definition hashes built on it.

The canonical form sorts object keys, drops insignificant white space and keeps non-ASCII text as
UTF-8, so two definitions that mean the same produce the same bytes whatever order or spacing a
server used. It follows RFC 8785 (JCS) for everything MCP definitions contain; numbers use Python's
shortest round-trip form.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def definition_hash(definition: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `definition`."""
    return hashlib.sha256(canonical_json(definition).encode("utf-8")).hexdigest()


def pretty_json(value: Any) -> str:
    """Readable, stable JSON for people and for diffs."""
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
