"""Django's PostgreSQL backend with two changes for a database that goes away or drops its
connections (registry.core.database_outage, docs/operations.md):

More: docs/operations.md, "Module notes".
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base
from psycopg import Error, OperationalError
from psycopg_pool import ConnectionPool

from registry.core.database_outage import (
    database_answered,
    database_away,
    database_circuit_open,
    database_refusal,
    database_trip,
)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        if database_circuit_open():
            raise OperationalError(str(database_refusal()))
        try:
            connection = super().get_new_connection(conn_params)
            pool: ConnectionPool | None = getattr(self, "pool", None)  # (Django's, untyped)
            if pool is not None:
                for _ in range(pool.max_size + 1):
                    try:
                        ConnectionPool.check_connection(connection)
                        break
                    except Error:  # broken: the pool discards it and opens another
                        pool.putconn(connection)
                        connection = super().get_new_connection(conn_params)
        except Error as exc:
            if database_away(exc):
                database_trip(exc)
            raise
        database_answered()
        return connection
