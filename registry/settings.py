"""Toolroom's Django settings, read from the environment only (see docs/configuration.md).

More: docs/configuration.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

import django_stubs_ext
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from registry.settings_parts.environment import *  # noqa: F403
from registry.settings_parts.environment import (
    BASE_DIR,
    DATA_DIR,
    IS_PRODUCTION,
    PROFILE,
    env,
    local_secret,
    owners_only_folder,
    required,
)

# Toolroom's own settings (imports, health, runtimes, the sandbox, the catalogue, the gateway).
from registry.settings_parts.logging import *  # noqa: F403
from registry.settings_parts.toolroom import *  # noqa: F403
from registry.settings_parts.toolroom import TOOLROOM_PUBLIC_URL

# Django's generic classes take their type arguments at run time too (`admin.ModelAdmin[Team]`,
# `forms.ModelForm[Grant]`): the types django-stubs gives them are written in the code.
django_stubs_ext.monkeypatch()


# --- Core --------------------------------------------------------------------------------------

if PROFILE == "production":
    SECRET_KEY = required("SECRET_KEY")
    # Fernet keys, comma-separated: the first encrypts, all decrypt (rotation).
    TOOLROOM_SECRETS_KEYS: list[str] = required("TOOLROOM_SECRETS_KEY").split(",")
elif PROFILE == "quickstart":
    SECRET_KEY = env.str("SECRET_KEY", default="") or local_secret(
        "secret_key", lambda: secrets.token_urlsafe(50)
    )
    TOOLROOM_SECRETS_KEYS = (
        env.str("TOOLROOM_SECRETS_KEY", default="")
        or local_secret("secrets_key", lambda: Fernet.generate_key().decode())
    ).split(",")
else:
    SECRET_KEY = env.str("SECRET_KEY", default="test-only-secret-key-" + "x" * 40)
    TOOLROOM_SECRETS_KEYS = env.str(
        "TOOLROOM_SECRETS_KEY", default="dGVzdC1vbmx5LXNlY3JldHMta2V5LTMyLWJ5dGVzISE="
    ).split(",")

DEBUG: bool = env.bool("DEBUG", default=False)

ALLOWED_HOSTS: list[str] = env.list(
    "ALLOWED_HOSTS", default=[] if IS_PRODUCTION else ["127.0.0.1", "localhost", "testserver"]
)
if IS_PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must be set in the production profile, "
        "e.g. ALLOWED_HOSTS=toolroom.example.com"
    )
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "guardian",
    "django_celery_beat",
    "axes",
    "registry.core",
    "registry.audit",
    "registry.servers",
    "workers",
    "registry.teams",
    # Toolroom's OAuth 2.1 authorization server (django-oauth-toolkit, its models swapped for
    # registry.oauth's: docs/authentication.md).
    "oauth2_provider",
    "registry.oauth",
    "registry.catalogue",
    # People's own accounts at per-person remote servers (docs/authentication.md).
    "registry.upstream",
    # The access rules and their explanation (no models): above the catalogue, below the gateway.
    "registry.access",
    "mozilla_django_oidc",
    "registry.portal",
    "registry.notifications",
    "registry.search",
    "registry.gateway",
    # Probes, metrics and the operators' commands: read every app above, imported by none.
    "registry.operations",
]

MIDDLEWARE = [
    "registry.core.request_ids.RequestIdMiddleware",
    "registry.core.database_outage.DatabaseOutageMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a locked-out sign-in into its answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "registry.urls"
WSGI_APPLICATION = "registry.wsgi.application"
ASGI_APPLICATION = "registry.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out sign-in before a password is checked (registry/core/sign_in).
    "registry.core.sign_in.SignInLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]

# --- Database ----------------------------------------------------------------------------------

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'toolroom.sqlite3'}"),
}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    if _db["NAME"] != ":memory:":
        _sqlite = Path(_db["NAME"])
        _sqlite.parent.mkdir(parents=True, exist_ok=True)
        # The database holds session keys and hashed tokens: its owner's only. SQLite creates
        # the -wal and -shm files with the database file's mode, so 0600 here covers them;
        # files an older version created 0644 are tightened.
        _sqlite.touch(mode=0o600, exist_ok=True)
        for _file in (_sqlite, Path(f"{_sqlite}-wal"), Path(f"{_sqlite}-shm")):
            _mode = _file.stat() if _file.exists() else None
            if _mode is not None and _mode.st_mode & 0o077 and _mode.st_uid == os.getuid():
                _file.chmod(0o600)
    # The web server and the workers write the same file: WAL lets readers go on during a write,
    # IMMEDIATE transactions take the write lock up front instead of failing half-way.
    _db.setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
else:
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Django's, with the outage circuit: no wait for a database known to be away.
        _db["ENGINE"] = "registry.core.postgresql"
    # A database that is away costs a request at most these (docs/operations.md, "A PostgreSQL
    # outage"): libpq's connect timeout (whole seconds, at least 2) and a statement timeout on
    # every connection (0: none; the compose stack's migrate sets 0 for long migrations).
    _db.setdefault("OPTIONS", {})["connect_timeout"] = env.int(
        "DATABASE_CONNECT_TIMEOUT", default=2
    )
    _statement_ms = env.int("DATABASE_STATEMENT_TIMEOUT_MS", default=15000)
    if _statement_ms > 0:
        _db["OPTIONS"]["options"] = f"-c statement_timeout={_statement_ms}"
    # Under ASGI every request runs its database work in a thread of its own, so connections
    # kept per thread (CONN_MAX_AGE > 0) pile up until PostgreSQL refuses more. A pool per process
    # hands connections to requests and takes them back; with it, CONN_MAX_AGE must be 0.
    if env.bool("DATABASE_POOL", default=True):
        _db["CONN_MAX_AGE"] = 0
        # A connection PostgreSQL closed (restart, pg_terminate_backend, a proxy's idle timeout)
        # is noticed when the pool hands it out, not by the request that would use it: one round
        # trip per checkout, and it is replaced at once. registry/core/postgresql/ checks it
        # (psycopg_pool's own check, asked for with CONN_HEALTH_CHECKS, backs off seconds
        # between broken connections).
        _db["CONN_HEALTH_CHECKS"] = False
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=1),
            "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=10),
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=5.0),
        }
    else:
        _db["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
        _db["CONN_HEALTH_CHECKS"] = True
    _db.setdefault("TEST", {})["NAME"] = env.str("DATABASE_TEST_NAME", default="") or None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, cache ------------------------------------------------------------------------------

REDIS_URL: str = env.str("REDIS_URL", default="")

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env.str("TOOLROOM_CACHE_PREFIX", default="toolroom"),
        }
    }
else:
    # Shared by every process of the embedded default (web server and workers).
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
        }
    }

# The catalogue's cache (registry/core/cache.py): a Redis that is down or frozen costs one
# timeout this short, then the circuit stays open (answers from the database, marked degraded) for
# the retry time; each process confirms the cache epoch with the database this often.
TOOLROOM_CACHE_TIMEOUT_SECONDS: float = env.float("TOOLROOM_CACHE_TIMEOUT_SECONDS", default=0.25)
TOOLROOM_CACHE_RETRY_SECONDS: float = env.float("TOOLROOM_CACHE_RETRY_SECONDS", default=5.0)
TOOLROOM_CACHE_REVALIDATE_SECONDS: float = env.float(
    "TOOLROOM_CACHE_REVALIDATE_SECONDS", default=1.0
)

# Heartbeats of workers, runtime workers and beat (workers/heartbeat.py): written this often,
# and a process whose last one is older than the stale time counts as gone (`/readyz`, probes).
TOOLROOM_HEARTBEAT_SECONDS: float = env.float("TOOLROOM_HEARTBEAT_SECONDS", default=15.0)
TOOLROOM_HEARTBEAT_STALE_SECONDS: float = env.float(
    "TOOLROOM_HEARTBEAT_STALE_SECONDS", default=60.0
)
# The queues whose depth `/readyz` reports (with the Redis broker).
TOOLROOM_QUEUES_WATCHED: list[str] = env.list(
    "TOOLROOM_QUEUES_WATCHED", default=["toolroom", "discovery", "runtime"]
)
# Discovery runs (registry/servers/jobs/discovery.py): a worker holds a run under a lease it
# renews every third of it; the janitor (beat, every 30 s) retries a run whose lease expired, at
# most this many attempts in all, and sends again a task the broker has not started after the
# redeliver time.
TOOLROOM_DISCOVERY_LEASE_SECONDS: float = env.float("TOOLROOM_DISCOVERY_LEASE_SECONDS", default=60)
TOOLROOM_DISCOVERY_MAX_ATTEMPTS: int = env.int("TOOLROOM_DISCOVERY_MAX_ATTEMPTS", default=3)
TOOLROOM_DISCOVERY_REDELIVER_SECONDS: float = env.float(
    "TOOLROOM_DISCOVERY_REDELIVER_SECONDS", default=900
)

# /metrics (registry/operations/metrics.py): open to a bearer token or to clients in these networks.
TOOLROOM_METRICS_TOKEN: str = env.str("TOOLROOM_METRICS_TOKEN", default="")
TOOLROOM_METRICS_ALLOWED_NETWORKS: list[str] = env.list(
    "TOOLROOM_METRICS_ALLOWED_NETWORKS", default=["127.0.0.1/32", "::1/128"]
)
# prometheus-client's multiprocess mode (uvicorn's workers write their samples there).
if env.str("PROMETHEUS_MULTIPROC_DIR", default=""):
    Path(env.str("PROMETHEUS_MULTIPROC_DIR")).mkdir(parents=True, exist_ok=True)

# --- Celery (the workers) ---------------------------------------------------------------------

# Redis when REDIS_URL is set; otherwise the embedded default, a broker in files under
# TOOLROOM_DATA_DIR, which real worker processes share without any service running.
CELERY_BROKER_URL: str = env.str(
    "CELERY_BROKER_URL", default=REDIS_URL or "filesystem://localhost/"
)
if CELERY_BROKER_URL.startswith("filesystem:"):
    # Message files written whole before a reader can see them (kombu's writer is not atomic).
    import registry.core.file_broker  # noqa: F401

    _broker_dir = DATA_DIR / "broker"
    # The queued messages carry task arguments: like the rest of the data folder, owner only.
    owners_only_folder(_broker_dir)
    for _sub in ("queue", "processed", "control"):
        owners_only_folder(_broker_dir / _sub)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("redis:", "rediss:")):
    # Several Toolroom installations (or test runs) may share one Redis: keep their queues apart.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "global_keyprefix": env.str("TOOLROOM_BROKER_KEY_PREFIX", default=""),
        # Tasks are acknowledged late (after they ran); one taken by a worker that died is given
        # to another after this long. Deliberately just above the hard time limit (not Redis's
        # 1 h default): no live task is ever handed out twice, a dead one is back within minutes.
        # Discovery does not wait for it: its lease and the janitor recover runs sooner.
        "visibility_timeout": env.int("CELERY_TASK_TIME_LIMIT", default=660) + 60,
    }
# How long the control plane's sends (web, gateway, tasks that send tasks) wait on the broker's
# socket: a frozen broker (SIGSTOP, a stalled network) costs a send this, not a hang.
TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS: float = env.float(
    "TOOLROOM_BROKER_SEND_TIMEOUT_SECONDS", default=1.0
)
CELERY_TASK_DEFAULT_QUEUE = "toolroom"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_DIRECT = True  # every worker gets a queue of its own (runtime routing)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker that refuses a command (Redis MISCONF on a full disk, READONLY, OOM) raises a channel
# error; without this the worker calls it unrecoverable and exits. With it the consumer
# reconnects with backoff (2 s, 4 s, ... up to 30 s), for as long as it takes.
CELERY_BROKER_CHANNEL_ERROR_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=600)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=660)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE: str = env.str("TIME_ZONE", default="UTC")

# --- Auth, passwords ---------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if PROFILE == "test":
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# People who are not staff sign in to the team portal; staff keep the admin's own sign-in.
LOGIN_URL = "portal:sign-in"
LOGIN_REDIRECT_URL = "portal:home"
LOGOUT_REDIRECT_URL = "portal:sign-in"

# --- People's MCP clients: the OAuth 2.1 authorization server (docs/authentication.md) ----------

# django-oauth-toolkit's models are registry.oauth's (they carry the person's client authorization:
# team, role, revocation). All six are swapped, so no migration depends on oauth2_provider's own.
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth.Client"
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth.AccessToken"  # noqa: S105 (a model)
OAUTH2_PROVIDER_REFRESH_TOKEN_MODEL = "oauth.RefreshToken"  # noqa: S105 (a model)
OAUTH2_PROVIDER_GRANT_MODEL = "oauth.Grant"
OAUTH2_PROVIDER_ID_TOKEN_MODEL = "oauth.IDToken"  # noqa: S105 (a model)
OAUTH2_PROVIDER_DEVICE_GRANT_MODEL = "oauth.DeviceGrant"
# A person's access token is short-lived (the client refreshes it by itself); refresh tokens rotate
# at every use and expire this long after their last access token did.
TOOLROOM_OAUTH_ACCESS_TOKEN_SECONDS: int = env.int(
    "TOOLROOM_OAUTH_ACCESS_TOKEN_SECONDS", default=600
)
TOOLROOM_OAUTH_REFRESH_TOKEN_SECONDS: int = env.int(
    "TOOLROOM_OAUTH_REFRESH_TOKEN_SECONDS", default=30 * 24 * 3600
)
TOOLROOM_OAUTH_CODE_SECONDS: int = env.int("TOOLROOM_OAUTH_CODE_SECONDS", default=60)
# Client ID Metadata Documents are fetched with the system's certificate authorities, or this
# bundle (a PEM file) instead.
TOOLROOM_OAUTH_CIMD_CA_BUNDLE: str = env.str("TOOLROOM_OAUTH_CIMD_CA_BUNDLE", default="")
OAUTH2_PROVIDER = {
    "OAUTH2_SERVER_CLASS": "registry.oauth.grants.ToolroomOAuthServer",
    "OAUTH2_VALIDATOR_CLASS": "registry.oauth.validator.ToolroomValidator",
    "ACCESS_TOKEN_GENERATOR": "registry.oauth.tokens.access_token_generate",
    "REFRESH_TOKEN_GENERATOR": "registry.oauth.tokens.refresh_token_generate",
    "ACCESS_TOKEN_EXPIRE_SECONDS": TOOLROOM_OAUTH_ACCESS_TOKEN_SECONDS,
    "REFRESH_TOKEN_EXPIRE_SECONDS": TOOLROOM_OAUTH_REFRESH_TOKEN_SECONDS,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": TOOLROOM_OAUTH_CODE_SECONDS,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "PKCE_REQUIRED": True,
    # OAuth 2.1's posture (RFC 9700): S256 only, no implicit or password grant, the `iss`
    # authorization-response parameter, tokens stored only as their SHA-256.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
    # Native clients (Claude Code, MCP Inspector) listen on a loopback port of the moment.
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "SCOPES": {"mcp": "Use the tools of one of your teams through Toolroom's gateway"},
    "DEFAULT_SCOPES": ["mcp"],
    # The admin switches both on and off (registry.oauth.models.AuthorizationServerPolicy); the
    # toolkit's own gates stay open and Toolroom's permission classes ask the policy.
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("registry.oauth.policy.RegistrationAllowed",),
    "CIMD_ENABLED": True,
    "CIMD_REGISTRATION_PERMISSION_CLASSES": ("registry.oauth.policy.MetadataDocumentsAllowed",),
    "CIMD_METADATA_FETCHER": "registry.oauth.cimd.GuardedMetadataFetcher",
    "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
}
# MCP clients on people's machines (Claude Code, VS Code, MCP Inspector) receive the code on a
# plaintext loopback address (RFC 8252 section 7.3): http redirect URIs stay allowed, which the
# toolkit's deploy check W008 warns about.
SILENCED_SYSTEM_CHECKS_OAUTH = ["oauth2_provider.W008"]

# --- Single sign-on (OpenID Connect, mozilla-django-oidc) --------------------------------------

# Set OIDC_RP_CLIENT_ID to turn single sign-on on; the provider's endpoints are then required.
OIDC_RP_CLIENT_ID: str = env.str("OIDC_RP_CLIENT_ID", default="")
if OIDC_RP_CLIENT_ID:
    OIDC_RP_CLIENT_SECRET: str = env.str("OIDC_RP_CLIENT_SECRET", default="")
    OIDC_OP_AUTHORIZATION_ENDPOINT: str = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT: str = env.str("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT: str = env.str("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT: str = env.str("OIDC_OP_JWKS_ENDPOINT")
    AUTHENTICATION_BACKENDS.insert(1, "registry.portal.oidc.PortalOidcBackend")
OIDC_RP_SIGN_ALGO: str = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
OIDC_RP_SCOPES: str = env.str("OIDC_RP_SCOPES", default="openid email profile")
OIDC_USE_PKCE = True
OIDC_REDIRECT_REQUIRE_HTTPS = IS_PRODUCTION
# A path, not a URL name: mozilla-django-oidc redirects to it as it is.
LOGIN_REDIRECT_URL_FAILURE = "/portal/sign-in/?sso=failed"
# The claim naming the person's teams ("" = memberships are managed in Toolroom only), the prefix
# its values carry before a team's slug, and the suffix that makes the person an owner.
TOOLROOM_OIDC_TEAMS_CLAIM: str = env.str("TOOLROOM_OIDC_TEAMS_CLAIM", default="")
TOOLROOM_OIDC_TEAM_PREFIX: str = env.str("TOOLROOM_OIDC_TEAM_PREFIX", default="")
TOOLROOM_OIDC_OWNER_SUFFIX: str = env.str("TOOLROOM_OIDC_OWNER_SUFFIX", default=":owner")
if TOOLROOM_OIDC_TEAMS_CLAIM and not TOOLROOM_OIDC_TEAM_PREFIX:
    # Without a prefix any group the identity provider has that is named like a team's slug (or
    # `slug:owner`) would grant that membership: whoever may name groups there could join any team.
    raise ImproperlyConfigured(
        "TOOLROOM_OIDC_TEAMS_CLAIM is set but TOOLROOM_OIDC_TEAM_PREFIX is empty: set a prefix "
        "that only the identity provider's groups meant for Toolroom carry (e.g. toolroom-)."
    )
# The sign-in button's wording: "Sign in with <this>".
TOOLROOM_OIDC_LABEL: str = env.str("TOOLROOM_OIDC_LABEL", default="single sign-on")

# --- E-mail (access request notifications) -----------------------------------------------------

# Production sends through SMTP (EMAIL_HOST...); the quickstart and tests print to the console.
EMAIL_BACKEND: str = env.str(
    "EMAIL_BACKEND",
    default="django.core.mail.backends.smtp.EmailBackend"
    if IS_PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST: str = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT: int = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER: str = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD: str = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS: bool = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL: bool = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT: int = env.int("EMAIL_TIMEOUT", default=20)
DEFAULT_FROM_EMAIL: str = env.str("DEFAULT_FROM_EMAIL", default="toolroom@localhost")

# Sign-in lockout (django-axes): after this many failures for one user name from one client
# address, that pair is refused for the cool-off time; a successful sign-in resets the count.
AXES_FAILURE_LIMIT: int = env.int("TOOLROOM_SIGN_IN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME: float = env.float("TOOLROOM_SIGN_IN_COOLOFF_HOURS", default=0.25)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
# The client address axes counts by: the socket's peer, or what the trusted proxies reported.
AXES_CLIENT_IP_CALLABLE = "registry.core.client_address.request_client_address"


# --- Internationalisation, static files --------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if IS_PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Outside production the static files are served from the apps without `collectstatic`.
WHITENOISE_USE_FINDERS = not IS_PRODUCTION
if not IS_PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# --- Security ----------------------------------------------------------------------------------

_https = env.bool("TOOLROOM_HTTPS", default=IS_PRODUCTION)
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=_https)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if _https else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=_https)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# Preloading HSTS commits the whole domain in browsers; only its operator can decide that
# (SECURE_HSTS_PRELOAD=true). Until then `check --deploy`'s reminder about it (W021) is noise.
SILENCED_SYSTEM_CHECKS: list[str] = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SILENCED_SYSTEM_CHECKS += SILENCED_SYSTEM_CHECKS_OAUTH
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env.bool("TOOLROOM_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many reverse proxies stand in front of the web and gateway processes, each appending the
# address it saw to X-Forwarded-For. 0: the socket's peer is the client, and X-Forwarded-For (which
# any client can write) is ignored. The sign-in lockout, DRF's throttles and the token-failure
# throttles of the web and the gateway all take the address from registry/core/client_address.py.
TOOLROOM_TRUSTED_PROXY_HOPS: int = env.int("TOOLROOM_TRUSTED_PROXY_HOPS", default=0)
if TOOLROOM_TRUSTED_PROXY_HOPS < 0:
    raise ImproperlyConfigured(
        f"TOOLROOM_TRUSTED_PROXY_HOPS must be 0 or more, not {TOOLROOM_TRUSTED_PROXY_HOPS}."
    )
# A large import is refused by Toolroom's own limit with a clear message, not by Django's.
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

# Failed agent-token authentications per client address and token prefix (the web's REST API and
# the gateway alike; registry/teams/token_failures.py), counted in the cache: "<count>/<period>".
TOOLROOM_THROTTLE_TOKEN_FAILURES: str = env.str(
    "TOOLROOM_THROTTLE_TOKEN_FAILURES", default="30/min"
)

# --- Django REST framework ---------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Agents: `Authorization: Bearer trm_...`; people: the admin's session.
        "registry.api.authentication.AgentTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["registry.api.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "registry.core.api_errors.api_exception_handler",
    # Rates of the throttles some views and the agent-token authentication apply; counted in
    # the default cache (Redis wherever REDIS_URL is set), so every web process shares them.
    "DEFAULT_THROTTLE_RATES": {
        "access_requests": env.str("TOOLROOM_THROTTLE_ACCESS_REQUESTS", default="60/hour"),
    },
    # DRF's own client address (a throttle that does not take Toolroom's): the same proxy hops.
    "NUM_PROXIES": TOOLROOM_TRUSTED_PROXY_HOPS,
    # `?format=` names the catalogue's output format, not a DRF renderer.
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Toolroom API",
    "DESCRIPTION": "Team registry and gateway for MCP servers.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The Swagger UI comes from drf-spectacular-sidecar's static files: no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One enum for a team's and a token's tool exposure (a token's may also be blank).
    "ENUM_NAME_OVERRIDES": {"ToolExposureEnum": "registry.teams.models.ToolExposure"},
}

# --- Toolroom (what needs the sections above; the rest is in settings_parts/toolroom.py) -------

# Which installation the sandbox's containers, networks and server processes belong to (a label
# on each): every clean-up touches only its own installation's, so two Toolrooms can share one
# Docker engine or host. Default: derived from SECRET_KEY and the database's name and location,
# which all processes of one installation share and two installations do not. Set it to keep
# it stable across a move of the database or a new SECRET_KEY.
TOOLROOM_INSTALLATION: str = env.str("TOOLROOM_INSTALLATION", default="") or (
    "toolroom-"
    + hmac.new(
        SECRET_KEY.encode(),
        "|".join(
            str(DATABASES["default"].get(part) or "") for part in ("ENGINE", "HOST", "PORT", "NAME")
        ).encode(),
        hashlib.sha256,
    ).hexdigest()[:12]
)
# The authorization server's issuer is the public URL (clients check it against the protected
# resource's metadata, RFC 8414 section 3.3); without one, the host of each request.
OAUTH2_PROVIDER["OIDC_ISS_ENDPOINT"] = TOOLROOM_PUBLIC_URL
