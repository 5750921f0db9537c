"""Create the PostgreSQL database DATABASE_URL names if it is missing (for `make test`).

DATABASE_URL is read exactly as Toolroom's settings read it (django-environ, `DATABASE_URL_FILE`
too). Any other engine, or no DATABASE_URL at all, is left alone.
"""

from __future__ import annotations

import sys
from typing import Any

import environ
import psycopg
from psycopg import sql

MAINTENANCE_DATABASES = ("postgres", "template1")


def _connect_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "connect_timeout": 10,
    }
    options = config.get("OPTIONS")
    if isinstance(options, dict):
        kwargs.update(options)
    return {key: value for key, value in kwargs.items() if value is not None}


def main() -> int:
    env = environ.FileAwareEnv()
    if not env.str("DATABASE_URL", default=""):
        return 0
    config = env.db_url("DATABASE_URL")
    if config["ENGINE"] not in (
        "django.db.backends.postgresql",
        "django.contrib.gis.db.backends.postgis",
    ):
        return 0
    name = str(config["NAME"])
    kwargs = _connect_kwargs(config)
    where = f"{kwargs.get('host', 'the local socket')}:{kwargs.get('port', 5432)}"
    last_error: Exception | None = None
    for maintenance in MAINTENANCE_DATABASES:
        try:
            with psycopg.connect(dbname=maintenance, autocommit=True, **kwargs) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
                ).fetchone()
                if exists is None:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                    print(f"    created PostgreSQL database {name} at {where}")
                return 0
        except psycopg.OperationalError as exc:
            last_error = exc
    print(
        f"Error: cannot reach PostgreSQL at {where} to check that database {name} exists: "
        f"{last_error}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
