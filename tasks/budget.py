"""The connection budget of the consumers: what each process may hold, and whether the
server has room for a plan of them.

A process that runs jobs holds at most ``LEDGER_CONNECTIONS`` connections to the ledger
(a bounded pool its threads share) and, on the PostgreSQL queue, ``QUEUE_CONNECTIONS``
for the queue (one for statements, one that LISTENs: ``huey_internals.ProcessConnections``;
a process worker, one thread, LISTENs on its statement connection and holds one).
A consumer of process workers adds its main process (the heartbeat's one connection to
the ledger, opened per beat) and its scheduler process (the queue's statement connection
only: it never waits on the queue, and reads no ledger). ``docs/deploy.md`` gives the
arithmetic per host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

LEDGER_CONNECTIONS = 2
QUEUE_CONNECTIONS = 2
# How long a thread waits for one of its process's ledger connections before its
# statement fails (the unit's job then fails and the ledger's rules retry it).
LEDGER_POOL_TIMEOUT_SECONDS = 30
# How a consumer names itself to PostgreSQL (``application_name``, with its pid and
# whether the connection is the ledger's or the queue's): ``pg_stat_activity`` shows it.
CONSUMER_APPLICATION_NAME = "taskledger-consumer"


def consumer_config() -> dict[str, Any]:
    """The app settings of a consumer process: its bounded ledger pool and its name."""
    return {
        "DATABASE_APPLICATION_NAME": CONSUMER_APPLICATION_NAME,
        "SQLALCHEMY_ENGINE_OPTIONS": {
            "pool_pre_ping": True,
            "pool_size": LEDGER_CONNECTIONS,
            "max_overflow": 0,
            "pool_timeout": LEDGER_POOL_TIMEOUT_SECONDS,
        },
    }


@dataclass(frozen=True)
class ProcessBudget:
    """Processes of one kind in a consumer, and what each may hold."""

    consumer: str
    role: str
    count: int
    ledger: int
    queue: int

    @property
    def connections(self) -> int:
        return self.count * (self.ledger + self.queue)


def consumer_processes(
    consumer: str, worker_type: str, workers: int, postgres_queue: bool
) -> list[ProcessBudget]:
    """The processes of one consumer and their budgets (``workers``: process workers or
    lanes for ``process``, threads or greenlets otherwise)."""
    queue = QUEUE_CONNECTIONS if postgres_queue else 0
    if worker_type != "process":
        # Workers, scheduler and heartbeat are threads of one process and share its pool.
        return [ProcessBudget(consumer, f"{workers} {worker_type}s", 1, LEDGER_CONNECTIONS, queue)]
    return [
        ProcessBudget(consumer, "main", 1, 1, 0),
        ProcessBudget(consumer, "scheduler", 1, 0, 1 if postgres_queue else 0),
        # One thread: it waits for work on its statement connection (ProcessConnections).
        ProcessBudget(consumer, "worker", workers, LEDGER_CONNECTIONS, 1 if postgres_queue else 0),
    ]


@dataclass(frozen=True)
class Room:
    """How many more connections a PostgreSQL server takes from this role on this
    database, and why (each limit that binds, as a phrase)."""

    free: int
    reasons: tuple[str, ...]


def server_room(url: str, connect_args: Mapping[str, Any] | None = None) -> Room:
    """What the server allows now: ``max_connections`` less the reserved slots and the
    connections in use, and the database's and the role's own limits less their use (a
    superuser is bound by neither). The asking connection is not counted as in use."""
    engine = create_engine(url, poolclass=NullPool, connect_args=dict(connect_args or {}))
    try:
        with engine.connect() as conn:
            row = conn.execute(text(ROOM_QUERY)).mappings().one()
    finally:
        engine.dispose()
    limits = [
        (
            row["max_connections"] - row["reserved"] - (row["in_use"] - 1),
            f"max_connections {row['max_connections']} - {row['reserved']} reserved"
            f" - {row['in_use'] - 1} in use",
        )
    ]
    if not row["superuser"]:
        if row["db_limit"] >= 0:
            limits.append(
                (
                    row["db_limit"] - (row["db_in_use"] - 1),
                    f"database limit {row['db_limit']} - {row['db_in_use'] - 1} in use",
                )
            )
        if row["role_limit"] >= 0:
            limits.append(
                (
                    row["role_limit"] - (row["role_in_use"] - 1),
                    f"role limit {row['role_limit']} - {row['role_in_use'] - 1} in use",
                )
            )
    free = min(limit for limit, _ in limits)
    return Room(max(0, free), tuple(reason for limit, reason in limits if limit == free))


# ``reserved_connections`` exists from PostgreSQL 16 on (missing_ok: NULL before).
ROOM_QUERY = """
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
         + coalesce(current_setting('reserved_connections', true)::int, 0) AS reserved,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend') AS in_use,
       (SELECT datconnlimit FROM pg_database WHERE datname = current_database()) AS db_limit,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND datname = current_database()) AS db_in_use,
       (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user) AS role_limit,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND usename = current_user) AS role_in_use,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser
"""
