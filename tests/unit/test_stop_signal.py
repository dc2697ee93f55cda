"""A consumer's stop is told apart from a job's failure, whatever shape it reaches us in.

Huey stops a process worker by raising ``KeyboardInterrupt`` from its SIGTERM handler.
An interrupt that lands inside a PostgreSQL statement comes back from psycopg with its
traceback cut off, so the handler's frame is gone: the worker's own note of the signal
is what still marks it as the stop (and a stop is handed back, never failed).
"""

from __future__ import annotations

import os
import signal
import threading
from types import SimpleNamespace

import pytest
from huey.consumer import ProcessEnvironment
from sqlalchemy import create_engine, text

from tasks import huey_internals, interrupts
from tasks.huey_internals import LaneEnvironment
from tests.conftest import BACKEND, PG_URL, require_postgres

BUSY = SimpleNamespace(huey=SimpleNamespace(_tasks_in_flight={"a task"}))


@pytest.fixture
def worker_signals(monkeypatch):
    """This process as a Huey process worker for the test: its handlers, its stop note."""
    monkeypatch.setattr(huey_internals, "_stop_signal_received", False)
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {signum: signal.getsignal(signum) for signum in stops}
    yield
    for signum, previous in saved.items():
        signal.signal(signum, previous)


def _terminate_once_sleeping(watcher, backend: int, done: threading.Event) -> None:
    """SIGTERM this process once its backend is inside ``pg_sleep``, never before or after.

    A fixed timer fired too early on a loaded machine, or after the test had failed and
    its handlers were restored, and then SIGTERM ended the whole test session.
    """
    seen = text(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND state = 'active'"
        " AND query LIKE 'SELECT pg_sleep%'"
    )
    with watcher.connect() as conn:
        while not done.wait(0.02):
            if conn.execute(seen, {"pid": backend}).scalar_one():
                os.kill(os.getpid(), signal.SIGTERM)
                return


def test_an_interrupt_inside_a_postgres_statement_is_the_stop_though_its_traceback_is_cut(
    worker_signals,
):
    if BACKEND != "postgres":
        # The suites of both backends run at once in CI, and the PostgreSQL one closes its
        # database to new connections in its outage tests: only that pass may use it.
        pytest.skip(
            "a PostgreSQL statement needs the PostgreSQL of the tests (TEST_BACKEND=postgres)"
        )
    require_postgres()
    engine, watcher = create_engine(PG_URL), create_engine(PG_URL)
    ProcessEnvironment().init_child(BUSY)
    huey_internals.watch_stop_signal()
    done = threading.Event()
    signaller = None
    try:
        with pytest.raises(BaseException) as raised:
            with engine.connect() as conn:
                backend = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                signaller = threading.Thread(
                    target=_terminate_once_sleeping, args=(watcher, backend, done)
                )
                signaller.start()
                conn.execute(text("SELECT pg_sleep(10)"))
    finally:
        done.set()
        if signaller is not None:
            signaller.join()
        engine.dispose()
        watcher.dispose()
    stop = interrupts.consumer_stop(raised.value)
    assert isinstance(stop, KeyboardInterrupt), repr(raised.value)
    # The case this guards: the driver re-raised the interrupt without Huey's frame.
    assert not interrupts._raised_by_stop_handler(stop)


def test_a_keyboard_interrupt_a_job_raises_itself_is_its_failure(worker_signals):
    huey_internals.watch_stop_signal()
    assert interrupts.consumer_stop(KeyboardInterrupt()) is None
    assert interrupts.consumer_stop(RuntimeError("boom")) is None


def test_once_the_stop_signal_came_an_interrupt_behind_another_error_is_the_stop(
    worker_signals,
):
    ProcessEnvironment().init_child(BUSY)
    huey_internals.watch_stop_signal()
    with pytest.raises(KeyboardInterrupt):
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    masked = RuntimeError("the pool could not reset its connection")
    masked.__context__ = KeyboardInterrupt()  # no traceback at all
    assert huey_internals.stop_signal_received()
    assert interrupts.consumer_stop(masked) is masked.__context__
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_stopping(masked)


def test_the_lean_lanes_stop_handler_is_the_stop_too(worker_signals):
    LaneEnvironment().init_child(SimpleNamespace(huey=BUSY.huey, hueys=[BUSY.huey]))
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as raised:
        handler(signal.SIGTERM, None)
    assert huey_internals.stop_signal_received()
    assert interrupts.consumer_stop(raised.value) is raised.value
