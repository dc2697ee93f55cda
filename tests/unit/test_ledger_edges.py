"""The ledger's promises at its edges: reused ids, stop signals against what a job raises,
throttle slots, heartbeats of superseded jobs, lost jobs past their horizon, a lost
database connection at the gate.

Jobs run through Huey's own ``execute`` on the test's real queue backend (SqliteHuey, or
RedisHuey next to PostgreSQL), in this process: a long-lived consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.contract import TaskOptions, TaskUnit, UnitJob, register
from taskrunner.heartbeat import heartbeat
from taskrunner.jobs import EXPIRED, GATE_PAUSES
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun, TaskRunUnit
from tasks.queues import queues
from tests.ops_types import HELD, THROTTLED, HeldTask, ThrottledTask, register_unchecked
from tests.support import drain, see_logs, wait_for


class Recorder:
    """Units ``r1..rN``; each execution records (type, unit, context marker); ``raises``
    makes every unit raise it instead."""

    def __init__(self, type_: str) -> None:
        self._type = type_
        self.ran: list[tuple[str, str, Any]] = []
        self.raises: BaseException | None = None

    def type(self) -> str:
        return self._type

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, int(context.get("units", 1)) + 1):
            yield TaskUnit(f"r{i}")

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        def job() -> None:
            self.ran.append((self._type, unit.key, context.get("marker")))
            if self.raises is not None and unit.key in context.get("raising", [unit.key]):
                raise self.raises

        return job

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=60)


@pytest.fixture
def recorders(make_app) -> tuple[Recorder, Recorder]:
    pair = (Recorder("tests.rec.first"), Recorder("tests.rec.second"))
    make_app.register(*pair)
    return pair


def fresh_run(run_uuid: str) -> TaskRun:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid)


def the_unit(run_uuid: str) -> TaskRunUnit:
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    return (
        db.session.execute(
            select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id).order_by(TaskRunUnit.id)
        )
        .scalars()
        .first()
    )


# -- item 2: ids are never reused, nothing is cached by id ---------------------------------


def test_a_run_made_after_the_newest_was_pruned_runs_its_own_definition_and_context(
    ctx, recorders, cli
):
    first, second = recorders
    old = runner.start(first.type(), {"marker": "old"}, "test")
    drain()  # this process now knows the old run
    old_id = fresh_run(old.uuid).id
    assert cli.invoke(args=["tasks", "prune", "--days", "0"]).output.startswith("pruned 1 run ")

    new = runner.start(second.type(), {"marker": "new"}, "test")
    drain()

    assert fresh_run(new.uuid).id > old_id  # the deleted id did not come back
    assert first.ran == [(first.type(), "r1", "old")]
    assert second.ran == [(second.type(), "r1", "new")]
    assert fresh_run(new.uuid).status == "completed"


def test_a_reused_run_id_never_runs_the_cached_runs_definition_or_context(ctx, recorders, cli):
    """AUTOINCREMENT keeps ids from coming back; the run cache must not lean on it."""
    first, second = recorders
    old = runner.start(first.type(), {"marker": "old"}, "test")
    drain()  # this process now caches the old run
    old_id = fresh_run(old.uuid).id
    assert cli.invoke(args=["tasks", "prune", "--days", "0"]).output.startswith("pruned 1 run")
    next_id_is(old_id)  # as a plain rowid, a restore or a sequence reset would hand it out

    new = runner.start(second.type(), {"marker": "new"}, "test")
    assert fresh_run(new.uuid).id == old_id
    drain()

    assert first.ran == [(first.type(), "r1", "old")]
    assert second.ran == [(second.type(), "r1", "new")]
    assert fresh_run(new.uuid).status == "completed"


def next_id_is(run_id: int) -> None:
    """Make the next run get ``run_id`` (no run may hold it)."""
    if db.engine.dialect.name == "postgresql":
        db.session.execute(
            text("SELECT setval(pg_get_serial_sequence('task_runs', 'id'), :id, false)"),
            {"id": run_id},
        )
    else:
        db.session.execute(
            text("UPDATE sqlite_sequence SET seq = :seq WHERE name = 'task_runs'"),
            {"seq": run_id - 1},
        )
    db.session.commit()


# -- item 3: a single tracked job's run is found by an indexed unique key --------------------


@contextmanager
def statements_of_this_thread() -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []
    me = threading.get_ident()

    def record(conn, cursor, statement, parameters, context, executemany):
        if threading.get_ident() == me:
            seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def query_plan(statement: str, parameters: Any) -> str:
    with db.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # A few rows make a sequential scan cheapest: forbid it to see what can be used.
            conn.exec_driver_sql("SET enable_seqscan = off")
            rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters).all()
        else:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
        return "\n".join(str(row[-1]) for row in rows)


def test_a_single_tracked_jobs_run_is_found_by_its_unique_dispatch_key_with_an_index(ctx):
    unit = TaskUnit("document-1", 7)
    first = ledger.single_jobs.begin_single_attempt("tests.single", unit, "dispatch-1", "queue")
    ledger.single_jobs.release_attempt(first, "try again")
    with statements_of_this_thread() as seen:
        again = ledger.single_jobs.begin_single_attempt("tests.single", unit, "dispatch-1", "queue")

    assert again.run.uuid == first.run.uuid and again.attempts == 2
    lookups = [
        (s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT") and "task_runs" in s
    ]
    assert lookups, seen
    for statement, parameters in lookups:
        plan = query_plan(statement, parameters)
        assert "uq_task_runs_dispatch_uuid" in plan, plan


# -- item 8: only a real stop signal hands a unit back ------------------------------------


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_whatever_a_job_raises_fails_that_unit_only_on_an_inline_queue(
    inline_ctx, recorders, raised
):
    first, _ = recorders
    first.raises = raised

    handle = runner.start(first.type(), {"units": 3, "raising": ["r2"]}, "test")

    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed, run.units_failed) == ("completed_with_failures", 2, 1)
    failed = ledger.runs.run_units_page(run, status="failed").items
    [reason] = [u["last_error"] for u in failed]
    assert see_logs(rf"builtins\.{type(raised).__name__}").fullmatch(reason)


def test_a_keyboard_interrupt_raised_by_a_job_is_its_failure_not_a_hand_back(ctx, recorders):
    first, _ = recorders
    first.raises = KeyboardInterrupt()
    handle = runner.start(first.type(), {}, "test")

    assert drain() == 1  # no new job: nothing was handed back

    run = fresh_run(handle.uuid)
    assert run.status == "failed"
    [reason] = [u["last_error"] for u in ledger.runs.run_units_page(run).items]
    assert see_logs(r"builtins\.KeyboardInterrupt").fullmatch(reason)
    assert len(first.ran) == 1


# -- item 9: a throttled job checks its token before it takes a slot -----------------------


def test_superseded_throttled_jobs_spend_no_rate_limit_slot(make_app):
    app = make_app(TASK_RUNNER_RATE_WINDOW_SECONDS=3600)
    with app.app_context():
        from tests.ops_types import RATE

        register(ThrottledTask())
        handle = runner.start(THROTTLED, {"units": RATE}, "test")
        huey = queues().huey("tasks")
        superseded = [huey.dequeue() for _ in range(RATE)]
        # An operator retries before the first jobs ran: every unit gets a new token.
        assert runner.retry(handle.uuid) == RATE
        for task in superseded:  # the old jobs are delivered after all
            huey.execute(task)
        assert drain() == RATE

        run = fresh_run(handle.uuid)
        assert (run.status, run.units_completed) == ("completed", RATE)
        assert {u["attempts"] for u in ledger.runs.run_units_page(run, limit=RATE).items} == {1}


# -- item 10: a superseded job's heartbeat never keeps the new attempt alive ----------------


def test_an_old_job_still_running_does_not_keep_the_retried_attempt_alive(make_app):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0.2)
    held = HeldTask()
    with app.app_context():
        register_unchecked(held)
    try:
        with app.app_context():
            handle = runner.start(HELD, {"units": 1}, "test")
            huey = queues().huey("tasks")
            old_job = threading.Thread(target=huey.execute, args=(huey.dequeue(),), daemon=True)
            old_job.start()
            assert held.started.acquire(timeout=10)
            # Past the held unit's threshold: the old job may be retried.
            later = utcnow() + timedelta(minutes=1)
            assert ledger.actions.count_retryable(fresh_run(handle.uuid), False, now=later) == 1
            runner.retry(handle.uuid, now=later)
            # The new attempt passes its gate, and its worker dies at once: no heartbeat.
            new_job = huey.dequeue()
            _run_id, unit_id, token, _horizon = new_job.args
            assert ledger.transitions.claim(unit_id, token) is not None

            wait_for(
                lambda: stale_reason(handle.uuid) == "worker lost",
                timeout=5,
                message="the new attempt to be found lost while the old job still beats",
            )
            held.release.set()
            old_job.join(10)
    finally:
        held.release.set()


def stale_reason(run_uuid: str) -> str | None:
    [unit] = ledger.runs.run_units_page(fresh_run(run_uuid), stale_only=True).items or [
        {"stale_reason": None}
    ]
    return unit["stale_reason"]


def test_the_heartbeat_names_the_token_it_beats_for(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    _run_id, unit_id, token, _horizon = queues().huey("tasks").dequeue().args
    ledger.transitions.claim(unit_id, token)
    before = the_unit(handle.uuid).heartbeat_at

    ledger.transitions.heartbeat([(unit_id, "0" * 32)])
    assert the_unit(handle.uuid).heartbeat_at == before
    with heartbeat.beating(unit_id, token):
        ledger.transitions.heartbeat([(unit_id, token)])
    assert the_unit(handle.uuid).heartbeat_at >= before


# -- item 11: nothing stays pending forever ------------------------------------------------


def test_the_stuck_sweep_fails_units_whose_lost_jobs_passed_the_drain_horizon(ctx, cli):
    handle = runner.start("diagnostics.probe", {"units": 3}, "test")
    queues().huey("tasks").storage.flush_queue()  # the queue lost every job
    horizon = timedelta(hours=ctx.config["TASK_RUNNER_RETRY_HORIZON_HOURS"])
    run_id = fresh_run(handle.uuid).id
    db.session.execute(
        update(TaskRunUnit)
        .where(TaskRunUnit.task_run_id == run_id, TaskRunUnit.unit_key != "probe-3")
        .values(queued_at=utcnow() - horizon - timedelta(minutes=1))
    )
    db.session.commit()

    assert cli.invoke(args=["tasks", "detect-stuck"]).exit_code == 0

    units = {u["unit_key"]: u for u in ledger.runs.run_units_page(fresh_run(handle.uuid)).items}
    assert {k: (u["status"], u["last_error"]) for k, u in units.items()} == {
        "probe-1": ("failed", EXPIRED),
        "probe-2": ("failed", EXPIRED),
        "probe-3": ("pending", None),  # still inside its horizon
    }
    assert ledger.runs.count_events("tasks.unit.failed", fresh_run(handle.uuid)) == 2

    db.session.execute(
        update(TaskRunUnit)
        .where(TaskRunUnit.task_run_id == run_id)
        .values(queued_at=utcnow() - horizon - timedelta(minutes=1))
    )
    db.session.commit()
    ledger.sweeps.mark_stuck()
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_failed) == ("failed", 3)
    assert ledger.runs.count_events("tasks.run.failed", run) == 1


def is_gate(statement: str) -> bool:
    return statement.lstrip().startswith("UPDATE task_run_units") and "attempts" in statement


def is_pending_check(statement: str) -> bool:
    """The throttled job's "still pending with my token" read, before its slot and gate."""
    text = statement.lstrip()
    return text.startswith("SELECT task_run_units.id") and "dispatch_token" in text


@contextmanager
def gate_breaks(times: int = 1, statement: Callable[[str], bool] = is_gate) -> Iterator[list[str]]:
    """Make the next ``times`` gate statements of this thread meet a database error.

    PostgreSQL: the server terminates the connection right before the statement, a real
    lost connection. SQLite: the statement is swapped for one the database rejects with
    an OperationalError.
    """
    broken: list[str] = []
    me = threading.get_ident()
    breaks = statement

    def gate(conn, cursor, statement, parameters, context, executemany):
        if len(broken) >= times or threading.get_ident() != me or not breaks(statement):
            return statement, parameters
        broken.append(statement)
        if conn.dialect.name == "postgresql":
            pid = conn.connection.dbapi_connection.info.backend_pid
            with db.engine.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            return statement, parameters
        return "UPDATE gate_fault_no_such_table SET x = 1", ()

    event.listen(db.engine, "before_cursor_execute", gate, retval=True)
    try:
        yield broken
    finally:
        event.remove(db.engine, "before_cursor_execute", gate)


def test_a_database_error_at_the_gate_is_retried_and_the_job_is_not_lost(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")

    with gate_breaks() as broken:
        assert drain() == 1

    assert broken, "the gate was never reached"
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)


@pytest.mark.parametrize("times", [1, len(GATE_PAUSES)], ids=["once", "every try"])
def test_a_database_error_at_a_throttled_jobs_pending_check_never_drops_the_job(make_app, times):
    app = make_app(TASK_RUNNER_RATE_WINDOW_SECONDS=3600)
    with app.app_context():
        register(ThrottledTask())
        handle = runner.start(THROTTLED, {"units": 1}, "test")
        huey = queues().huey("tasks")
        job = huey.dequeue()

        with gate_breaks(times, statement=is_pending_check) as broken:
            huey.execute(job)

        assert len(broken) == times, "the pending check was never reached"
        if times == len(GATE_PAUSES):  # never reachable: back in the queue, still pending
            [again] = huey.scheduled()
            assert again.id == job.id
            assert fresh_run(handle.uuid).status == "running"
            again.eta = None
            huey.execute(again)
        run = fresh_run(handle.uuid)
        assert (run.status, run.units_completed) == ("completed", 1)


def test_a_gate_on_a_connection_the_server_dropped_is_retried_on_a_fresh_one(ctx, caplog):
    """The hot path runs its statements on the driver's connection, past SQLAlchemy's
    execution (and with no cursor listener, as in production): a connection PostgreSQL
    terminated between two units still meets the gate's retry, never loses the job."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the driver path and server-side termination are PostgreSQL's")
    handle = runner.start("diagnostics.probe", {"units": 2}, "test")
    huey = queues().huey("tasks")
    first, second = huey.dequeue(), huey.dequeue()
    huey.execute(first)  # the worker's hot connection is open now
    with db.engine.connect() as other:
        terminated = other.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    assert terminated >= 1

    with caplog.at_level("WARNING", logger="tasks.outages"):
        huey.execute(second)

    assert "Database unavailable (the gate of unit" in caplog.text
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 2)


def test_a_gate_that_keeps_failing_puts_the_job_back_in_the_queue(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    huey = queues().huey("tasks")
    job = huey.dequeue()

    with gate_breaks(times=len(GATE_PAUSES)):
        huey.execute(job)

    [again] = huey.scheduled()  # requeued with a delay, not dropped
    assert again.id == job.id
    assert fresh_run(handle.uuid).status == "running"
    again.eta = None
    huey.execute(again)
    assert fresh_run(handle.uuid).status == "completed"
