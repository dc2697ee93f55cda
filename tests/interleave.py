"""Forcing an interleaving of real concurrent sessions, statement by statement.

A hook on the engine holds a named thread right before a chosen statement (or before
its commit) until the test lets it go, so a race is not hoped for but made: "prune has
read its candidates; now the retry commits; now prune updates". Each thread runs in its
own app context, with its own session and database connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine

from extensions import db

WAIT = 15.0  # seconds any step may take before the test gives up


class Hold:
    """Hold thread ``name`` at its first statement matching ``match`` until ``release()``.

    ``at="commit"`` holds it instead right before it commits, once ``match`` has matched
    one of its statements; ``at="begin"`` before it takes a connection for its next
    transaction (on SQLite, before it asks for the write lock: held inside a transaction,
    it would keep every other writer out).
    """

    def __init__(
        self, engine: Engine, name: str, match: Callable[[str], bool], at: str = ""
    ) -> None:
        self.engine, self.name, self.match, self.at = engine, name, match, at
        self.reached = threading.Event()
        self._go = threading.Event()
        self._armed = False

    def _mine(self) -> bool:
        return threading.current_thread().name == self.name and not self.reached.is_set()

    def _statement(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if self._mine() and self.match(statement):
            if self.at in ("commit", "begin"):
                self._armed = True
            else:
                self._hold(conn)

    def _commit(self, conn) -> None:
        if self.at == "commit" and self._mine() and self._armed:
            self._hold(conn)

    def _checkout(self, dbapi_connection, record, proxy) -> None:
        if self.at == "begin" and self._mine() and self._armed:
            self.reached.set()
            if not self._go.wait(WAIT):
                raise TimeoutError(f"{self.name} was never released")

    def _hold(self, conn: Connection) -> None:
        self.reached.set()
        if not self._go.wait(WAIT):
            # Raised from the commit hook, the error leaves the transaction open at the
            # server while the pool takes the connection back as reset: its locks would
            # stay, and the fixture's cleanup wait on them forever instead of the test
            # reporting why it failed. A closed connection ends the transaction.
            conn.invalidate()
            raise TimeoutError(f"{self.name} was never released")

    def release(self) -> None:
        self._go.set()

    def wait_reached(self) -> None:
        if not self.reached.wait(WAIT):
            raise TimeoutError(f"{self.name} never reached the statement it is held at")

    def __enter__(self) -> Hold:
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "commit", self._commit)
        event.listen(self.engine, "checkout", self._checkout)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "commit", self._commit)
        event.remove(self.engine, "checkout", self._checkout)


@contextmanager
def meeting(engine: Engine, names: list[str], match: Callable[[str], bool]) -> Iterator[None]:
    """The named threads wait for each other right before their first matching statement.

    A thread that cannot get there (blocked by a lock the others hold) lets the others
    go on after ``WAIT``: that is a safe interleaving too.
    """
    barrier = threading.Barrier(len(names))
    met: set[str] = set()

    def hook(conn, cursor, statement, parameters, context, executemany) -> None:
        name = threading.current_thread().name
        if name in names and name not in met and match(statement):
            met.add(name)
            try:
                barrier.wait(WAIT)
            except threading.BrokenBarrierError:
                pass

    event.listen(engine, "before_cursor_execute", hook)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", hook)


class InThread:
    """Run ``fn(*args, **kwargs)`` in a named thread with its own app context; keep its
    result or error."""

    def __init__(self, app: Flask, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any):
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            with app.app_context():
                try:
                    self.result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the test through join()
                    self.error = exc
                finally:
                    db.session.remove()

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(WAIT * 2)
        assert not self.thread.is_alive(), f"{self.thread.name} is still running"
        return self.result


def wait_until_blocked_on_a_lock(sessions: int = 1) -> None:
    """Poll PostgreSQL until ``sessions`` connections wait for a lock another one holds."""
    deadline = time.monotonic() + WAIT
    with db.engine.connect() as conn:
        while True:
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            if waiting >= sessions:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("no session ever waited for the lock")
            conn.rollback()
            time.sleep(0.01)
