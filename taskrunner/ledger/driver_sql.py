"""The hot path's two statements on the driver's own connection.

The gate and the completion run once per unit. Through SQLAlchemy's execution, the
parameter processing and result set-up of each cost about as much CPU as the database
spends on it (``bench/RESULTS.md``). Here a statement is rendered once per dialect and
run on the DB-API connection; its errors are wrapped as SQLAlchemy wraps them, and a
lost connection is invalidated, so callers handle failures exactly as before. Only for
drivers whose connections execute directly (psycopg, sqlite3), and only while nothing
listens for cursor events (tracing, a test's fault injection): a listener sees every
statement. On SQLite the statement runs inside the database write lock (the hot
transaction's BEGIN IMMEDIATE): every microsecond spent there is one the other workers
wait, and a worker that finds the lock taken sleeps a millisecond or more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement

_RENDERED: dict[tuple[ClauseElement, str], tuple[str, dict[str, Any]]] = {}
# sqlite3 takes named parameters (``:name``) as well as SQLAlchemy's positional ones.
_SQLITE_NAMED = sqlite.dialect(paramstyle="named")
# How SQLAlchemy stores a datetime on SQLite (sqlite3's own adapter drops a zero
# microsecond, and stored moments are compared as text).
_SQLITE_DATETIME = "%Y-%m-%d %H:%M:%S.%f"


def runs_on_driver(conn: Connection) -> bool:
    dispatch = conn.dispatch
    listened = dispatch.before_cursor_execute or dispatch.after_cursor_execute
    return conn.dialect.driver in ("psycopg", "pysqlite") and not listened


def first_row(
    conn: Connection, statement: ClauseElement, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The first row ``statement`` returns (positional), executed on the DB-API connection."""
    sql, defaults = _rendered(conn, statement)
    values = {**defaults, **params}
    if conn.dialect.name == "sqlite":
        values = {
            name: value.strftime(_SQLITE_DATETIME) if isinstance(value, datetime) else value
            for name, value in values.items()
        }
    fairy = conn.connection
    try:
        cursor = fairy.driver_connection.execute(sql, values)
        # Every row read and the cursor closed: sqlite3 cannot commit while a statement
        # (an UPDATE … RETURNING not read to its end) is still in progress.
        rows = cursor.fetchall()
        cursor.close()
        return rows[0] if rows else None
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
        dialect = _SQLITE_NAMED if conn.dialect.name == "sqlite" else conn.dialect
        compiled = statement.compile(dialect=dialect)
        # An IN list of fixed values is rendered here once, as SQLAlchemy renders it
        # per execution; the values each call binds are left as placeholders.
        unbound = {bind.key: None for bind in compiled.binds.values() if bind.required}
        expanded = compiled.construct_expanded_state(unbound)
        found = _RENDERED[key] = (expanded.statement, dict(expanded.parameters))
    return found
