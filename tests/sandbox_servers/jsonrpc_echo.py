"""Not an MCP server: answers every JSON-RPC request line with an empty result, standard library
only. The benchmark uses it to measure what the transport alone costs per round trip."""

from __future__ import annotations

import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}) + "\n")
    sys.stdout.flush()
