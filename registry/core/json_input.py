"""JSON from clients must be Unicode text: a lone UTF-16 surrogate is refused where it is parsed.

JSON's `\\ud800` escape decodes to a Python string no UTF-8 encoder accepts; left in, it fails far
from the request (an upstream call, an audit row) as a 500. The REST API's parser and the gateway's
REST endpoint refuse it with a 400 instead. A surrogate pair (`\\ud83d\\ude00`) is one character and
passes.
"""

from __future__ import annotations

import re
from typing import Any

LONE_SURROGATE_MESSAGE = (
    "The JSON holds a lone UTF-16 surrogate (an escape such as \\ud800 without its pair); "
    "strings must be valid Unicode."
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Only a \u escape can put a surrogate into parsed JSON (UTF-8 input cannot carry one).
_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def json_has_lone_surrogate(data: Any, *, raw: bytes | None = None) -> bool:
    """Whether parsed JSON `data` holds a lone surrogate in any key or string; `raw`, the text it
    was parsed from, lets a body without any surrogate escape skip the walk."""
    if raw is not None and not _ESCAPE.search(raw):
        return False
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
