"""Logging: plain or JSON lines, each with the request id (registry/settings.py imports it)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from registry.settings_parts.environment import env

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
    # django-axes announces itself ("AXES: BEGIN ...") whenever Django starts, so on every
    # manage.py call; its sign-in records come from axes.handlers and are kept.
    "loggers": {"axes.apps": {"level": "WARNING"}},
}
