"""The hot path's two statements on the driver's own connection.

The gate and the completion run once per unit. Through SQLAlchemy's execution, the
parameter processing and result set-up of each cost about as much CPU as the database
spends on it (``bench/RESULTS.md``). Here a statement is rendered once per dialect and
run on the DB-API connection; its errors are wrapped as SQLAlchemy wraps them, and a
lost connection is invalidated, so callers handle failures exactly as before. Only for
drivers whose connections execute directly (psycopg), and only while nothing listens
for cursor events (tracing, a test's fault injection): a listener sees every statement.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement

_RENDERED: dict[tuple[ClauseElement, str], tuple[str, dict[str, Any]]] = {}


def runs_on_driver(conn: Connection) -> bool:
    dispatch = conn.dispatch
    listened = dispatch.before_cursor_execute or dispatch.after_cursor_execute
    return conn.dialect.driver == "psycopg" and not listened


def first_row(
    conn: Connection, statement: ClauseElement, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The first row ``statement`` returns (positional), executed on the DB-API connection."""
    sql, defaults = _rendered(conn, statement)
    values = {**defaults, **params}
    fairy = conn.connection
    try:
        return fairy.driver_connection.execute(sql, values).fetchone()
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, fairy.dbapi_connection, None)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            sql,
            values,
            exc,
            conn.dialect.loaded_dbapi.Error,
            connection_invalidated=lost,
            dialect=conn.dialect,
        ) from exc


def _rendered(conn: Connection, statement: ClauseElement) -> tuple[str, dict[str, Any]]:
    key = (statement, conn.dialect.name)
    found = _RENDERED.get(key)
    if found is None:
        compiled = statement.compile(dialect=conn.dialect)
        found = _RENDERED[key] = (compiled.string, dict(compiled.params))
    return found
