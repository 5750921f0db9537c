"""The per-team catalogue: who sees which tools, under which names, in which format, how cached."""
