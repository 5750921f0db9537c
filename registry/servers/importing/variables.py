"""Which `${VAR}` an import may read: operator-allowed variables only, never Toolroom's secrets.

An import file is written by someone who may add servers, not by whoever runs the web process:
letting it name any variable would copy the process's secrets (SECRET_KEY, the encryption keys,
cloud credentials) into a server's description or headers. So from the process environment an
import reads only variables whose names start with `TOOLROOM_IMPORT_`, or that the operator lists
in the setting TOOLROOM_IMPORT_ALLOWED_VARIABLES. Toolroom's own secrets are never expanded, by
name or by value, whoever passes the environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from django.conf import settings

ALLOWED_PREFIX = "TOOLROOM_IMPORT_"
ALLOWED_SETTING = "TOOLROOM_IMPORT_ALLOWED_VARIABLES"

# Toolroom's own secrets (and the files they may come from); refused even when listed.
TOOLROOM_SECRET_VARIABLES = frozenset(
    name + suffix
    for name in (
        "SECRET_KEY",
        "TOOLROOM_SECRETS_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "CELERY_BROKER_URL",
        "TOOLROOM_ADMIN_PASSWORD",
        "DJANGO_SUPERUSER_PASSWORD",
    )
    for suffix in ("", "_FILE")
)


def _own_secret_values() -> set[str]:
    values = {str(settings.SECRET_KEY), *settings.TOOLROOM_SECRETS_KEYS}
    return {value for value in values if value}


def variable_refusal(name: str, value: str | None, *, from_process: bool) -> str | None:
    """Why `${name}` may not be expanded (None: it may). `from_process`: the value comes from
    the process environment, where only operator-allowed names may be read."""
    if name in TOOLROOM_SECRET_VARIABLES or (value and value in _own_secret_values()):
        return f"refers to ${{{name}}}, one of Toolroom's own secrets, which imports never read"
    if from_process and not _operator_allowed(name):
        return (
            f"refers to ${{{name}}}, which imports may not read: name it "
            f"{ALLOWED_PREFIX}{name.removeprefix(ALLOWED_PREFIX)} or add {name} to "
            f"{ALLOWED_SETTING} (a comma-separated environment variable) to allow it"
        )
    return None


def _operator_allowed(name: str) -> bool:
    return name.startswith(ALLOWED_PREFIX) or name in getattr(settings, ALLOWED_SETTING, [])


class ProcessVariables(Mapping[str, str]):
    """The process environment as an import sees it: operator-allowed names only."""

    def __init__(self, source: Mapping[str, str] | None = None) -> None:
        self._source = os.environ if source is None else source

    def __getitem__(self, name: str) -> str:
        if not _operator_allowed(name):
            raise KeyError(name)
        return self._source[name]

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._source if _operator_allowed(name))

    def __len__(self) -> int:
        return sum(1 for _ in self)
