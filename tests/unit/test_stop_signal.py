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
from tests.conftest import PG_URL, require_postgres

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


def test_an_interrupt_inside_a_postgres_statement_is_the_stop_though_its_traceback_is_cut(
    worker_signals,
):
    require_postgres()
    engine = create_engine(PG_URL)
    ProcessEnvironment().init_child(BUSY)
    huey_internals.watch_stop_signal()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    try:
        with pytest.raises(BaseException) as raised:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_sleep(10)"))
    finally:
        engine.dispose()
    stop = interrupts.consumer_stop(raised.value)
    assert isinstance(stop, KeyboardInterrupt)
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
