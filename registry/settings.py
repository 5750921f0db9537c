"""Toolroom's Django settings, read from the environment only (see docs/configuration.md).

Every knob is an environment variable; secrets may also come from `<NAME>_FILE`. A profile picks
safe defaults for where Toolroom runs:

- ``production`` (the default): refuses to start without SECRET_KEY, TOOLROOM_SECRETS_KEY and
  ALLOWED_HOSTS; secure cookies, HSTS, no private networks reachable.
- ``quickstart`` (``make run``): generates and keeps a local secret key and encryption key under
  TOOLROOM_DATA_DIR, allows loopback MCP servers, serves over plain HTTP on 127.0.0.1.
- ``test``: like quickstart with fixed keys and a fast password hasher.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import django_stubs_ext
import environ
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from environ.fileaware_mapping import FileAwareMapping

# Django's generic classes take their type arguments at run time too (`admin.ModelAdmin[Team]`,
# `forms.ModelForm[Grant]`): the types django-stubs gives them are written in the code.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent


class _SecretFileMapping(FileAwareMapping):
    """Reads `<NAME>_FILE` like django-environ does, without the file's trailing newline.

    Secret files made by `echo`, editors or `docker secret` end with a newline; kept, it would
    become part of the secret key, the database name in DATABASE_URL, or a password.
    """

    def __getitem__(self, key: str) -> str:
        value: str = super().__getitem__(key)
        return value.rstrip("\r\n") if self.env.get(key + "_FILE") else value


class _Env(environ.FileAwareEnv):
    ENVIRON = _SecretFileMapping()


env = _Env()

PROFILES = ("production", "quickstart", "test")
PROFILE: str = env.str("TOOLROOM_PROFILE", default="production")
if PROFILE not in PROFILES:
    raise ImproperlyConfigured(f"TOOLROOM_PROFILE={PROFILE!r} is not one of {', '.join(PROFILES)}.")
IS_PRODUCTION = PROFILE == "production"

DATA_DIR = Path(env.str("TOOLROOM_DATA_DIR", default=str(BASE_DIR / "var")))
if not IS_PRODUCTION and not DATA_DIR.exists():
    # The quickstart's database, keys and admin password live here: for its owner only.
    DATA_DIR.mkdir(mode=0o700, parents=True)


def _local_secret(name: str, make: Any) -> str:
    """Return a secret kept in DATA_DIR, creating it (mode 0600) on first use.

    Only the quickstart profile uses this: production must be given its secrets.
    """
    path = DATA_DIR / name
    if path.exists():
        return path.read_text().strip()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    value = str(make())
    path.touch(mode=0o600)
    path.write_text(value + "\n")
    return value


def _required(name: str) -> str:
    value: str = env.str(name, default="")
    if not value:
        raise ImproperlyConfigured(
            f"{name} must be set in the production profile (or {name}_FILE naming a file that "
            f"holds it). For a local trial run `make run`, which uses TOOLROOM_PROFILE=quickstart."
        )
    return value


# --- Core --------------------------------------------------------------------------------------

if PROFILE == "production":
    SECRET_KEY = _required("SECRET_KEY")
    # Fernet keys, comma-separated: the first encrypts, all decrypt (rotation).
    TOOLROOM_SECRETS_KEYS: list[str] = _required("TOOLROOM_SECRETS_KEY").split(",")
elif PROFILE == "quickstart":
    SECRET_KEY = env.str("SECRET_KEY", default="") or _local_secret(
        "secret_key", lambda: secrets.token_urlsafe(50)
    )
    TOOLROOM_SECRETS_KEYS = (
        env.str("TOOLROOM_SECRETS_KEY", default="")
        or _local_secret("secrets_key", lambda: Fernet.generate_key().decode())
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
    "registry.catalogue",
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
    # Under ASGI every request runs its database work in a thread of its own, so connections
    # kept per thread (CONN_MAX_AGE > 0) pile up until PostgreSQL refuses more. A pool per process
    # hands connections to requests and takes them back; with it, CONN_MAX_AGE must be 0.
    if env.bool("DATABASE_POOL", default=True):
        _db["CONN_MAX_AGE"] = 0
        # A connection PostgreSQL closed (restart, pg_terminate_backend, a proxy's idle timeout)
        # is noticed when the pool hands it out (Django passes psycopg_pool's check_connection),
        # not by the request that would use it: one round trip per checkout, and it is replaced.
        _db["CONN_HEALTH_CHECKS"] = True
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=1),
            "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=10),
            "timeout": env.int("DATABASE_POOL_TIMEOUT", default=30),
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
# Discovery runs (registry/servers/operations/discovery.py): a worker holds a run under a lease it
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
    _broker_dir = DATA_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
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
CELERY_TASK_DEFAULT_QUEUE = "toolroom"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_DIRECT = True  # every worker gets a queue of its own (runtime routing)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
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
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env.bool("TOOLROOM_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# A large import is refused by Toolroom's own limit with a clear message, not by Django's.
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

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
        "agent_token_failures": env.str("TOOLROOM_THROTTLE_TOKEN_FAILURES", default="30/min"),
    },
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

# --- Logging -----------------------------------------------------------------------------------

# LOG_FORMAT=json: one JSON object a line, with the request id that follows a request into the
# tasks it starts (registry/core/request_ids.py).
LOG_FORMAT: str = env.str("LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, not {LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "registry.core.request_ids.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "registry.core.request_ids.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# --- Toolroom ----------------------------------------------------------------------------------

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
# Under ASGI, answer cached catalogues and 304s straight from Redis (registry/catalogue/fastpath).
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
# Stateless (2026-07-28) clients without a conversation id are their token: how long after its
# last confidential read the private-data ratchet holds (a sliding window).
TOOLROOM_GATEWAY_CONVERSATION_WINDOW_SECONDS: int = env.int(
    "TOOLROOM_GATEWAY_CONVERSATION_WINDOW_SECONDS", default=3600
)
