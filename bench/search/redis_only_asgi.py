"""Toolroom's ASGI application with the fast path's in-process search answers turned off.

The search bench serves this beside `registry.asgi:application` to measure, in the same run,
what keeping search answers in the process (registry.catalogue.search.search_answer_kept)
saves over reading every cached answer from Redis: the only difference is that nothing is
ever found kept.
"""

from __future__ import annotations

from registry import asgi
from registry.api import fastpath


def _nothing_kept(**_: object) -> None:
    return None


vars(fastpath)["search_answer_kept"] = _nothing_kept  # the name the fast path calls
application = asgi.application
