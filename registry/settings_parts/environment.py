"""The environment the settings read: the profile, the data folder, secrets from `<NAME>_FILE`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from environ.fileaware_mapping import FileAwareMapping

# The settings registry/settings.py takes from here as they are.
__all__ = ["BASE_DIR", "DATA_DIR", "IS_PRODUCTION", "PROFILE", "PROFILES", "env"]

BASE_DIR = Path(__file__).resolve().parent.parent.parent


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


def owners_only_folder(path: Path) -> None:
    """Make `path` (and missing parents) a folder only its owner can enter: 0700, tightening one
    that a set-up script or an older version made 0755 (files inside are then out of other
    users' reach whatever their own mode)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = path.stat()
    if found.st_mode & 0o077 and found.st_uid == os.getuid():
        path.chmod(0o700)


if not IS_PRODUCTION:
    # The quickstart's database, keys, admin password and embedded broker live here.
    owners_only_folder(DATA_DIR)


def local_secret(name: str, make: Any) -> str:
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


def required(name: str) -> str:
    value: str = env.str(name, default="")
    if not value:
        raise ImproperlyConfigured(
            f"{name} must be set in the production profile (or {name}_FILE naming a file that "
            f"holds it). For a local trial run `make run`, which uses TOOLROOM_PROFILE=quickstart."
        )
    return value
