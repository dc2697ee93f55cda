"""A database that refuses connections, for real: a PostgreSQL URL on a port where nothing
listens (every backend alike), and a PostgreSQL backend terminated under a running
statement (``pg_terminate_backend``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy import event

from app import create_app
from harness import free_port

GIVE_UP_SECONDS = 2


def refused_url() -> str:
    """A PostgreSQL URL on a port of this machine where nothing listens."""
    return f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/taskledger"


def refused_app(base_config: dict, **overrides):
    """The test app's twin (same secret key: its cookies are good) whose database refuses
    every connection. Made outside ``make_app``: there are no tables to empty after it."""
    return create_app(
        {
            **base_config,
            "SQLALCHEMY_DATABASE_URI": refused_url(),
            "NETWORK_CONNECT_TIMEOUT_SECONDS": GIVE_UP_SECONDS,
            **overrides,
        }
    )


@contextmanager
def backend_terminated_at_next_statement(engine, admin_url: str) -> Iterator[list[str]]:
    """The next statement ``engine`` runs finds its PostgreSQL backend terminated by the
    server (``pg_terminate_backend``, as an administrator or a failover would); yields the
    statements it happened to (one, once the context has done its work)."""
    hit: list[str] = []
    dsn = admin_url.replace("postgresql+psycopg://", "postgresql://")

    def terminate(conn, _cursor, statement, _parameters, _context, _executemany) -> None:
        if hit:
            return
        hit.append(statement)
        pid = conn.connection.dbapi_connection.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            # The timeout makes the call wait until the backend has gone.
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])

    event.listen(engine, "before_cursor_execute", terminate)
    try:
        yield hit
    finally:
        event.remove(engine, "before_cursor_execute", terminate)
