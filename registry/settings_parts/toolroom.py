"""Toolroom's own settings: imports, access requests, health, runtimes, the sandbox, the catalogue
and the gateway (registry/settings.py imports them all)."""

from __future__ import annotations

from registry.settings_parts.environment import DATA_DIR, IS_PRODUCTION, PROFILE, env

# --- Toolroom ----------------------------------------------------------------------------------

# A PostgreSQL outage (registry/core/database_outage.py): the last state confirmed with the
# database is served from the cache for at most this long (marked `X-Toolroom-Degraded:
# database`; 0: never), and what needs the database is refused at once for the retry time after
# a failure before one request tries again.
TOOLROOM_DATABASE_OUTAGE_SECONDS: float = env.float(
    "TOOLROOM_DATABASE_OUTAGE_SECONDS", default=180.0
)
TOOLROOM_DATABASE_RETRY_SECONDS: float = env.float("TOOLROOM_DATABASE_RETRY_SECONDS", default=2.0)
# Web and gateway processes confirm the cache epoch every TOOLROOM_CACHE_REVALIDATE_SECONDS from a
# thread of their own, so an idle one may serve its last confirmed state in an outage.
TOOLROOM_EPOCH_KEEPER: bool = env.bool("TOOLROOM_EPOCH_KEEPER", default=True)

# Networks an MCP server URL may point into although they are private, loopback, link-local or
# otherwise internal. Production allows none unless told; the quickstart allows loopback so the
# MCP servers a newcomer starts locally work out of the box.
TOOLROOM_ALLOWED_NETWORKS: list[str] = env.list(
    "TOOLROOM_ALLOWED_NETWORKS",
    default=[] if IS_PRODUCTION else ["127.0.0.0/8", "::1/128"],
)
# Where imports look up the newest version of an unpinned npx/uvx package (to pin it).
TOOLROOM_PYPI_URL: str = env.str("TOOLROOM_PYPI_URL", default="https://pypi.org").rstrip("/")
TOOLROOM_NPM_REGISTRY_URL: str = env.str(
    "TOOLROOM_NPM_REGISTRY_URL", default="https://registry.npmjs.org"
).rstrip("/")
# Imports resolve and record a package server's whole dependency tree (uv for PyPI, npm for npm;
# registry/servers/dependency_locks.py). The test profile leaves it to the tests that ask for it.
TOOLROOM_IMPORT_LOCK_DEPENDENCIES: bool = env.bool(
    "TOOLROOM_IMPORT_LOCK_DEPENDENCIES", default=PROFILE != "test"
)
# Import plans (and the admin's server form) ask each new HTTP server without an Authorization
# header, once, whether it signs each person in with OAuth (a 401 naming its resource metadata);
# such a server is imported as a per-person server. The test profile leaves it to the tests.
TOOLROOM_IMPORT_PROBE_OAUTH: bool = env.bool(
    "TOOLROOM_IMPORT_PROBE_OAUTH", default=PROFILE != "test"
)
# Largest import file (mcp.json, server.json, YAML) accepted, in bytes.
TOOLROOM_IMPORT_MAX_BYTES: int = env.int("TOOLROOM_IMPORT_MAX_BYTES", default=1024 * 1024)
# Environment variables an import's `${VAR}` may read besides those named TOOLROOM_IMPORT_*;
# Toolroom's own secrets (SECRET_KEY, TOOLROOM_SECRETS_KEY, DATABASE_URL...) never.
TOOLROOM_IMPORT_ALLOWED_VARIABLES: list[str] = env.list(
    "TOOLROOM_IMPORT_ALLOWED_VARIABLES", default=[]
)
# Access requests are read by people: how many a team may keep open, how many one server may
# have open across teams, and how many a team may create in 24 hours (withdrawn ones count).
TOOLROOM_ACCESS_REQUESTS_OPEN_PER_TEAM: int = env.int(
    "TOOLROOM_ACCESS_REQUESTS_OPEN_PER_TEAM", default=25
)
TOOLROOM_ACCESS_REQUESTS_OPEN_PER_SERVER: int = env.int(
    "TOOLROOM_ACCESS_REQUESTS_OPEN_PER_SERVER", default=200
)
TOOLROOM_ACCESS_REQUESTS_PER_TEAM_PER_DAY: int = env.int(
    "TOOLROOM_ACCESS_REQUESTS_PER_TEAM_PER_DAY", default=100
)
# A failing server that the gateway wants (a call asked for it, or its calls failed) is checked
# again at most this long after each failure, instead of the doubling backoff (up to an hour).
TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS: float = env.float(
    "TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS", default=15.0
)
# A health check slower than this (milliseconds) marks the server degraded.
TOOLROOM_HEALTH_DEGRADED_LATENCY_MS: int = env.int(
    "TOOLROOM_HEALTH_DEGRADED_LATENCY_MS", default=5000
)
# How many servers one health-check task checks, and how many of those at once.
TOOLROOM_HEALTH_BATCH_SIZE: int = env.int("TOOLROOM_HEALTH_BATCH_SIZE", default=100)
TOOLROOM_HEALTH_CONCURRENCY: int = env.int("TOOLROOM_HEALTH_CONCURRENCY", default=50)
# A runtime worker that has not reported for this long (seconds) has lost its warm servers.
TOOLROOM_RUNTIME_STALE_SECONDS: int = env.int("TOOLROOM_RUNTIME_STALE_SECONDS", default=60)
# A warm runtime that ran this long before crashing gets its restart budget back.
TOOLROOM_RUNTIME_STABLE_SECONDS: int = env.int("TOOLROOM_RUNTIME_STABLE_SECONDS", default=300)
# Status shows "owner lost" for a runtime whose worker's heartbeat is older than this (the claim
# itself may be taken over only after TOOLROOM_RUNTIME_STALE_SECONDS).
TOOLROOM_RUNTIME_OWNER_LOST_SECONDS: int = env.int(
    "TOOLROOM_RUNTIME_OWNER_LOST_SECONDS", default=15
)
# How long discovery waits for a server to answer its handshake (package runners such as npx
# and uvx may download the server first).
TOOLROOM_DISCOVERY_TIMEOUT_SECONDS: int = env.int("TOOLROOM_DISCOVERY_TIMEOUT_SECONDS", default=60)
# The owner label of the sandbox containers this worker starts (default: the host name); the
# janitor removes a dead worker's containers by it. Give workers on one host distinct names
# only if they share no engine.
TOOLROOM_SANDBOX_OWNER: str = env.str("TOOLROOM_SANDBOX_OWNER", default="")
# `sandbox prune` (and its daily task) keeps this many images each server ran most recently, and
# every image younger than the age given (hours): a worker may be about to run what it built.
TOOLROOM_SANDBOX_PRUNE_KEEP: int = env.int("TOOLROOM_SANDBOX_PRUNE_KEEP", default=2)
TOOLROOM_SANDBOX_PRUNE_MIN_AGE_HOURS: int = env.int(
    "TOOLROOM_SANDBOX_PRUNE_MIN_AGE_HOURS", default=24
)

# --- Catalogue ---------------------------------------------------------------------------------

# Where agents and clients reach Toolroom (the gateway's MCP endpoint is `<this>/mcp/`); empty:
# the host of each request.
# Every URL given to agents (mcp.json, /v0.1/servers, the gateway) is built from this one
# setting; the quickstart serves on 127.0.0.1:$PORT and says so.
TOOLROOM_PUBLIC_URL: str = env.str(
    "TOOLROOM_PUBLIC_URL",
    default="" if IS_PRODUCTION else f"http://127.0.0.1:{env.int('PORT', default=8000)}",
).rstrip("/")
# The reverse-DNS namespace of server names in `/v0.1/servers`; empty: from TOOLROOM_PUBLIC_URL.
TOOLROOM_REGISTRY_NAMESPACE: str = env.str("TOOLROOM_REGISTRY_NAMESPACE", default="")
# Leave unhealthy servers' tools out of catalogues instead of flagging them.
TOOLROOM_CATALOGUE_HIDE_UNHEALTHY: bool = env.bool(
    "TOOLROOM_CATALOGUE_HIDE_UNHEALTHY", default=False
)
# How long a rendered catalogue stays in the cache (keyed by version); 0 turns that cache off.
TOOLROOM_CATALOGUE_CACHE_SECONDS: int = env.int("TOOLROOM_CATALOGUE_CACHE_SECONDS", default=3600)
# Under ASGI, answer cached catalogues and 304s straight from Redis (registry/api/fastpath).
TOOLROOM_CATALOGUE_FAST_PATH: bool = env.bool("TOOLROOM_CATALOGUE_FAST_PATH", default=True)

# The gateway (docs/gateway.md). Where clients reach its MCP endpoint (mcp.json hands it out);
# empty: <TOOLROOM_PUBLIC_URL>/mcp, for a reverse proxy that sends /mcp to the gateway.
TOOLROOM_GATEWAY_URL: str = env.str("TOOLROOM_GATEWAY_URL", default="")
# Where the web app forwards POST /api/v1/tools/{name}/call (the gateway's own address).
TOOLROOM_GATEWAY_INTERNAL_URL: str = env.str(
    "TOOLROOM_GATEWAY_INTERNAL_URL", default="http://127.0.0.1:8001"
)
# How long call records are kept (a scheduled clean-up deletes older ones).
TOOLROOM_GATEWAY_CALL_RETENTION_DAYS: int = env.int(
    "TOOLROOM_GATEWAY_CALL_RETENTION_DAYS", default=90
)
# How long the hourly usage rollup (the usage dashboard's data) is kept; longer than the records.
TOOLROOM_GATEWAY_USAGE_RETENTION_DAYS: int = env.int(
    "TOOLROOM_GATEWAY_USAGE_RETENTION_DAYS", default=400
)
# The gateway's call journal: every call record is appended here before it waits for its batch
# INSERT, and what a killed gateway process left is written at the next start (docs/gateway.md).
# Empty: records wait in memory only (a killed process loses up to a second of them).
TOOLROOM_GATEWAY_JOURNAL_DIR: str = env.str(
    "TOOLROOM_GATEWAY_JOURNAL_DIR", default=str(DATA_DIR / "gateway-journal")
)
# How often the gateway writes the records that gathered (seconds; sooner once 500 did).
TOOLROOM_GATEWAY_AUDIT_FLUSH_SECONDS: float = env.float(
    "TOOLROOM_GATEWAY_AUDIT_FLUSH_SECONDS", default=1.0
)
# The shared circuit's open time (seconds): this long after the gateway opened a server's circuit
# (or after a failed probe), one real call across all gateway processes goes through as the
# half-open probe; its success closes the circuit for all of them (docs/gateway.md).
TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS: float = env.float(
    "TOOLROOM_GATEWAY_CIRCUIT_OPEN_SECONDS", default=10.0
)
# Upstream HTTP sessions nobody used for this long are closed.
TOOLROOM_GATEWAY_IDLE_SECONDS: int = env.int("TOOLROOM_GATEWAY_IDLE_SECONDS", default=300)
# The key that signs callers' identity tokens (EC P-256, PEM; or TOOLROOM_IDENTITY_KEY_FILE).
# Empty: outside production a key kept in TOOLROOM_DATA_DIR (identity-key.pem) is made on first use;
# in production, servers whose policy passes the caller's identity cannot be called without it.
TOOLROOM_IDENTITY_KEY: str = env.str("TOOLROOM_IDENTITY_KEY", default="")
TOOLROOM_IDENTITY_KEY_PATH: str = "" if IS_PRODUCTION else str(DATA_DIR / "identity-key.pem")
# A runtime worker's private endpoint, through which gateways call its stdio/sandboxed servers.
TOOLROOM_RUNTIME_ENDPOINT_ENABLED: bool = env.bool(
    "TOOLROOM_RUNTIME_ENDPOINT_ENABLED", default=True
)
TOOLROOM_RUNTIME_ENDPOINT_HOST: str = env.str("TOOLROOM_RUNTIME_ENDPOINT_HOST", default="127.0.0.1")
TOOLROOM_RUNTIME_ENDPOINT_PORT: int = env.int("TOOLROOM_RUNTIME_ENDPOINT_PORT", default=0)
# The host name gateways use to reach it (empty: the listening host).
TOOLROOM_RUNTIME_ENDPOINT_ADVERTISE: str = env.str(
    "TOOLROOM_RUNTIME_ENDPOINT_ADVERTISE", default=""
)
# The private-data ratchet (docs/gateway.md): how long after a token's (or person's) last
# confidential read its connect-class calls stay refused, for teams that set no window of their own.
TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS: int = env.int(
    "TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS", default=24 * 3600
)
# Quotas (docs/gateway.md, "Quotas"): the defaults for every team, which an admin may change per
# team (Team quotas in the admin). A "caller" is one agent token, or one person with OAuth
# tokens. 0 means no limit. Enforced across gateway processes through Redis (REDIS_URL), else in
# the one gateway process.
TOOLROOM_QUOTA_SESSIONS_PER_TEAM: int = env.int("TOOLROOM_QUOTA_SESSIONS_PER_TEAM", default=500)
TOOLROOM_QUOTA_SESSIONS_PER_CALLER: int = env.int("TOOLROOM_QUOTA_SESSIONS_PER_CALLER", default=100)
TOOLROOM_QUOTA_CALLS_PER_MINUTE_PER_TEAM: int = env.int(
    "TOOLROOM_QUOTA_CALLS_PER_MINUTE_PER_TEAM", default=120_000
)
TOOLROOM_QUOTA_CALLS_PER_MINUTE_PER_CALLER: int = env.int(
    "TOOLROOM_QUOTA_CALLS_PER_MINUTE_PER_CALLER", default=60_000
)
TOOLROOM_QUOTA_CONCURRENT_CALLS_PER_TEAM: int = env.int(
    "TOOLROOM_QUOTA_CONCURRENT_CALLS_PER_TEAM", default=400
)
TOOLROOM_QUOTA_CONCURRENT_CALLS_PER_CALLER: int = env.int(
    "TOOLROOM_QUOTA_CONCURRENT_CALLS_PER_CALLER", default=200
)
# Handshake sessions one gateway process holds at most, all teams together (the SDK's cap; past
# it a new session gets 503). Keep it above the sessions per team times the teams that may be busy.
TOOLROOM_GATEWAY_MAX_SESSIONS: int = env.int("TOOLROOM_GATEWAY_MAX_SESSIONS", default=10_000)
