"""The scanner's limits: what counts as oversized, padded or too deep, and how much it reads."""

from __future__ import annotations

from typing import Final

# A description longer than this is flagged: reviewers stop reading long before it ends, and it is
# sent with every request. Server instructions and prompt texts get the same limit by default.
MAX_DESCRIPTION_CHARS: Final = 4_000
# Canonical JSON (UTF-8 bytes) of an input or output schema above this is flagged.
MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_SCHEMA_DEPTH: Final = 32
# The MCP specification recommends 1-128 characters from A-Z a-z 0-9 _ - . for tool names.
MAX_NAME_CHARS: Final = 128
# Blank runs this long push what follows out of a reviewer's view (a known poisoning trick).
PADDING_RUN_CHARS: Final = 200
PADDING_RUN_NEWLINES: Final = 20
# The phrase rules read at most head + tail characters of one string; hidden characters and
# sizes are still counted over the whole string. The tail is kept because payloads hide at the
# end of padded text.
PATTERN_SCAN_HEAD_CHARS: Final = 24_576
PATTERN_SCAN_TAIL_CHARS: Final = 8_192
# Beyond this many hidden characters in one string only the total is counted, not their classes.
HIDDEN_CHARS_DETAILED: Final = 10_000
EXCERPT_CONTEXT_CHARS: Final = 40
MAX_EXCERPT_CHARS: Final = 160
