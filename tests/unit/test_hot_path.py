"""The worker's hot path: two transactions per unit, and the run still closes exactly once.

What is attacked here is the promise the cheaper path must keep: a completion that
looks for other active units inside its own transaction can never leave a run open
(two workers each seeing the other's unit still running) nor close it twice.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from huey.exceptions import TaskTimeout
from sqlalchemy import create_engine, event, text

from extensions import db
from taskrunner import runner
from taskrunner.jobs import _settle
from taskrunner.ledger import ledger, release_hot_connection
from taskrunner.soft_timeout import soft_timeouts
from tasks.queues import queues
from tests.conftest import BACKEND
from tests.support import queued_jobs
from tests.unit.test_ledger_rules import fresh_run


def test_a_unit_that_is_not_the_last_costs_two_transactions_and_no_checkout(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 4}, "test")
    huey = queues().huey("tasks")
    jobs = queued_jobs()
    assert len(jobs) == 4
    huey.execute(jobs[0])  # the run's type and context are now known to this process
    begins, checkouts = [], []
    engine = db.engine

    def began(conn):
        begins.append(conn)

    def checked_out(*_args):
        checkouts.append(1)

    event.listen(engine, "begin", began)
    event.listen(engine.pool, "checkout", checked_out)
    try:
        for job in jobs[1:3]:
            huey.execute(job)
    finally:
        event.remove(engine, "begin", began)
        event.remove(engine.pool, "checkout", checked_out)

    assert len(begins) == 4  # per unit: the gate, then completion with its look
    assert checkouts == []
    huey.execute(jobs[3])
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 4)
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


@pytest.mark.parametrize("round_", range(12))
def test_the_last_units_settled_together_close_the_run_exactly_once(ctx, controlled, round_):
    size = 2 + round_ % 3
    handle = runner.start("tests.controlled", {"units": size}, "test")
    jobs = queued_jobs()
    assert len(jobs) == size
    claims = [ledger.transitions.claim(job.args[1], job.args[2]) for job in jobs]
    release_hot_connection()
    barrier = threading.Barrier(size)
    app, errors = ctx, []

    def settle(claim):
        try:
            with app.app_context():
                barrier.wait()
                assert _settle(claim, None) is True
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)
        finally:
            release_hot_connection()

    threads = [threading.Thread(target=settle, args=(claim,)) for claim in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", size)
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


def test_the_driver_path_stores_what_sqlalchemy_would_store(ctx, controlled, monkeypatch):
    """The gate and the completion run on the driver's own connection, on both backends;
    their moments read back exactly, stored as SQLAlchemy stores them, a moment on a
    whole second included (sqlite3's own adapter would drop its microseconds)."""
    from sqlalchemy.dialects import sqlite

    from taskrunner.ledger import driver_sql, transitions

    whole_second = datetime(2026, 12, 3, 1, 2, 3)
    monkeypatch.setattr(transitions, "utcnow", lambda: whole_second)
    on_driver = []
    monkeypatch.setattr(
        transitions,
        "first_row",
        lambda *args: on_driver.append(args[1]) or driver_sql.first_row(*args),
    )
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    first, second = queued_jobs()
    huey = queues().huey("tasks")
    huey.execute(first)

    assert len(on_driver) == 2  # the gate, then the completion with its look
    started, finished = db.session.execute(
        text("SELECT started_at, finished_at FROM task_run_units WHERE id = :id"),
        {"id": first.args[1]},
    ).one()
    if db.engine.dialect.name == "sqlite":
        stored = sqlite.DATETIME().bind_processor(sqlite.dialect())(whole_second)
        assert (started, finished) == (stored, stored)
    else:
        assert (started, finished) == (whole_second, whole_second)
    db.session.rollback()
    huey.execute(second)
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 2)
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


def test_a_look_that_meets_a_unit_being_written_sends_the_worker_to_finalize(ctx, controlled):
    if db.engine.dialect.name != "postgresql":
        pytest.skip("row locks and SKIP LOCKED are PostgreSQL's; SQLite has one writer")
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    first, second = (ledger.transitions.claim(job.args[1], job.args[2]) for job in queued_jobs())
    other = create_engine(db.engine.url)
    try:
        with other.connect() as conn:
            # Another worker is completing the second unit right now, not committed yet.
            conn.execute(
                text("UPDATE task_run_units SET status = 'completed' WHERE id = :id"),
                {"id": second.unit_id},
            )
            outcome = ledger.transitions.complete_and_look(first)
            assert (outcome.settled, outcome.maybe_last) == (True, True)
            # Its finalize looks after the commit: the second unit still runs for it.
            assert ledger.transitions.finalize(first.run.id) is None
            conn.rollback()
    finally:
        other.dispose()
    outcome = ledger.transitions.complete_and_look(second)
    assert (outcome.settled, outcome.maybe_last) == (True, True)
    assert ledger.transitions.finalize(second.run.id) == "completed"
    assert fresh_run(handle.uuid).status == "completed"


def test_a_look_that_finds_an_active_unit_leaves_the_run_to_it(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 3}, "test")
    claims = [ledger.transitions.claim(job.args[1], job.args[2]) for job in queued_jobs()]

    first = ledger.transitions.complete_and_look(claims[0])
    second = ledger.transitions.complete_and_look(claims[1])
    again = ledger.transitions.complete_and_look(claims[1])  # a duplicate of a settled completion

    assert (first.settled, first.maybe_last) == (True, False)
    assert (second.settled, second.maybe_last) == (True, False)
    assert (again.settled, again.maybe_last) == (False, False)
    assert fresh_run(handle.uuid).status == "running"
    last = ledger.transitions.complete_and_look(claims[2])
    assert (last.settled, last.maybe_last) == (True, True)
    assert ledger.transitions.finalize(claims[2].run.id) == "completed"


# -- soft timeouts (thread workers) ----------------------------------------------------


def in_thread(work):
    outcome: list = []

    def run():
        try:
            outcome.append(("returned", work()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return outcome[0]


def test_a_soft_timeout_stops_a_job_at_its_next_python_instruction():
    def job():
        with soft_timeouts.limit(0.2):
            for _ in range(100):
                time.sleep(0.05)  # a client call with its own short timeout, again and again
        return "finished"

    kind, value = in_thread(job)
    assert kind == "raised" and isinstance(value, TaskTimeout)


def test_a_job_that_swallows_its_soft_timeout_is_still_timed_out():
    def job():
        with soft_timeouts.limit(0.1):
            try:
                time.sleep(0.3)
                time.sleep(0.01)
            except Exception:
                pass
        return "finished"

    kind, value = in_thread(job)
    assert kind == "raised" and isinstance(value, TaskTimeout)


def test_a_job_within_its_soft_timeout_is_never_interrupted_later():
    def job():
        with soft_timeouts.limit(0.2):
            time.sleep(0.05)
        time.sleep(0.4)  # past the deadline, outside the limit: nothing may land here
        return "finished"

    assert in_thread(job) == ("returned", "finished")


# -- settings ----------------------------------------------------------------------------


def test_a_deployment_routes_another_type_to_the_io_lane(make_app):
    app = make_app(TASK_RUNNER_TYPE_ROUTES="tests.nothing=tasks, diagnostics.probe=io")
    with app.app_context():
        runner.start("diagnostics.probe", {"units": 2}, "test")
        assert queues().huey("io").pending_count() == 2
        assert queues().huey("tasks").pending_count() == 0


def test_durable_unit_commits_keep_the_same_books(make_app):
    app = make_app(TASK_RUNNER_UNIT_COMMIT="durable", QUEUE_IMMEDIATE=True)
    with app.app_context():
        handle = runner.start("diagnostics.probe", {"units": 5, "fail_every": 5}, "test")
        run = fresh_run(handle.uuid)
        assert (run.status, run.units_completed, run.units_failed) == (
            "completed_with_failures",
            4,
            1,
        )


def test_a_gate_that_finds_no_free_connection_puts_the_job_back_never_drops_it(
    ctx, controlled, monkeypatch
):
    from huey.exceptions import RetryTask
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    from taskrunner import jobs

    runner.start("tests.controlled", {"units": 1}, "test")
    (job,) = queued_jobs()

    def exhausted(unit_id, token):
        raise PoolTimeout("QueuePool limit reached")

    monkeypatch.setattr(jobs.ledger.transitions, "claim", exhausted)
    with pytest.raises(RetryTask):
        jobs.gate("unit", lambda: jobs.ledger.transitions.claim(job.args[1], job.args[2]))


@pytest.mark.skipif(BACKEND != "postgres", reason="PostgreSQL's planner statistics")
def test_a_run_that_finds_the_units_table_never_analyzed_gathers_its_statistics(ctx):
    """Without statistics the look read and sorted every active unit of the run on each
    completion; with any, it walks the run's status index from its newest unit."""
    from taskrunner.ledger.hot import COMPLETE_AND_LOOK
    from taskrunner.ledger.planner_stats import NEVER_ANALYZED
    from taskrunner.types import TaskUnit

    db.session.execute(text("DELETE FROM pg_statistic WHERE starelid = 'task_run_units'::regclass"))
    db.session.commit()
    assert db.session.execute(NEVER_ANALYZED).scalar_one()
    db.session.rollback()

    units = [TaskUnit(f"unit-{i}") for i in range(2_000)]
    dispatch = ledger.transitions.create_run("tests.controlled", {}, "test", units, 1_000)

    assert not db.session.execute(NEVER_ANALYZED).scalar_one()
    params = {"unit_id": 1, "token": dispatch.token, "now": None, "run_id": dispatch.run_id}
    plan = "\n".join(
        row[0] for row in db.session.execute(text(f"EXPLAIN {COMPLETE_AND_LOOK.text}"), params)
    )
    db.session.rollback()
    assert "Index Scan Backward using ix_task_run_units_run_status" in plan, plan
    assert "Sort" not in plan, plan
