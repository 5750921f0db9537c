"""What-if patches for the health-sweep benchmark; never part of the product.

Loaded only into the benchmark's own Celery worker processes, which it starts with
PYTHONPATH=bench/health_sweep/whatif and BENCH_WHATIF=<comma-separated names>:

- cached-ssl: `guarded_http_client` builds its transport with one SSL context per process
  instead of a new one per client (httpx2 otherwise loads the CA bundle for every client, even
  for plain-http URLs). This is the change suggested for workers/adapters/mcp_client.py.
- pinned-protocol: sessions that would negotiate with mode="auto" are opened with the protocol
  pinned to 2026-07-28, skipping the `server/discover` probe (one HTTP request per check). The
  product would pin only servers whose last discovery negotiated that version.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

WHATIF = {name for name in os.environ.get("BENCH_WHATIF", "").split(",") if name}

if WHATIF:
    import httpx2

    from workers.adapters import guarded_http, mcp_client

    if "cached-ssl" in WHATIF:

        @functools.cache
        def _ssl_context() -> ssl.SSLContext:
            return httpx2.create_ssl_context(trust_env=False)

        def guarded_http_client(
            *, headers: Any, allowed_networks: Any, deadlines: Any
        ) -> httpx2.AsyncClient:
            transport = httpx2.AsyncHTTPTransport(trust_env=False, verify=_ssl_context())
            transport._pool._network_backend = guarded_http.GuardedBackend(allowed_networks)
            return httpx2.AsyncClient(
                headers=dict(headers),
                timeout=httpx2.Timeout(deadlines.call, connect=deadlines.connect),
                transport=transport,
                trust_env=False,
            )

        mcp_client.guarded_http_client = guarded_http_client

    if "pinned-protocol" in WHATIF:
        _Client = mcp_client.Client

        def _pinned_client(*args: Any, mode: str = "auto", **kwargs: Any) -> Any:
            return _Client(*args, mode="2026-07-28" if mode == "auto" else mode, **kwargs)

        mcp_client.Client = _pinned_client  # type: ignore[assignment,misc]
