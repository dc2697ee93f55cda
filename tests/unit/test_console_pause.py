"""Pausing a task type at the gate; targeted retry; the consumers' board and presence rows."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import event, func, select, update

from database import utcnow
from extensions import db
from taskrunner import console, runner
from taskrunner.contract import Refused
from taskrunner.jobs import run_unit
from taskrunner.ledger import ledger
from taskrunner.models import OperatorAction, TaskRun, TaskRunUnit, UnitThroughput
from tasks.presence import Board, ConsumerPresence, Presence
from tests.conftest import BACKEND
from tests.web.backoffice_support import finished_run


def units_of(run_uuid: str) -> dict[str, TaskRunUnit]:
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    rows = db.session.execute(select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id))
    return {u.unit_key: u for u in rows.scalars()}


def test_a_paused_types_units_stay_pending_without_a_try_and_continue_on_resume(
    inline_ctx, controlled
):
    assert runner.pause(controlled.type()) is True
    assert runner.pause(controlled.type()) is False  # already paused: nothing changes

    handle = runner.start(controlled.type(), {"units": 3}, "test")

    units = units_of(handle.uuid)
    assert {u.status for u in units.values()} == {"pending"}
    assert {u.attempts for u in units.values()} == {0}
    assert controlled.executions == {}
    assert ledger.runs.get_run(handle.uuid).status == "running"

    assert runner.resume(controlled.type()) == 3

    units = units_of(handle.uuid)
    assert {u.status for u in units.values()} == {"completed"}
    assert {u.attempts for u in units.values()} == {1}
    assert ledger.runs.get_run(handle.uuid).status == "completed"
    actions = db.session.execute(
        select(OperatorAction.action, OperatorAction.detail).order_by(OperatorAction.id)
    ).all()
    assert [(a, d.get("type")) for a, d in actions] == [
        ("pause", controlled.type()),
        ("resume", controlled.type()),
    ]
    assert actions[1][1]["units"] == 3


def test_a_paused_unit_is_not_expired_past_its_drain_horizon(ctx, controlled):
    handle = runner.start(controlled.type(), {"units": 2}, "test")
    runner.pause(controlled.type())
    run = ledger.runs.get_run(handle.uuid)
    unit = units_of(handle.uuid)["k1"]
    old = utcnow() - timedelta(hours=100)
    db.session.execute(update(TaskRunUnit).values(queued_at=old))
    db.session.commit()

    # Its job dequeued after the horizon, and the periodic sweep: neither fails it.
    run_unit.call_local(run.id, unit.id, unit.dispatch_token, time.time() - 1, controlled.type())
    assert ledger.sweeps.expire_beyond_horizon() == []
    ledger.sweeps.mark_stuck()

    assert {u.status for u in units_of(handle.uuid).values()} == {"pending"}
    runner.resume(controlled.type())
    # Once resumed, the horizon is a fresh one: the sweep still leaves them be.
    assert ledger.sweeps.expire_beyond_horizon() == []


def test_the_gate_refuses_a_paused_type_and_a_job_from_before_the_resume_does_nothing(
    ctx, controlled
):
    handle = runner.start(controlled.type(), {"units": 1}, "test")
    unit = units_of(handle.uuid)["k1"]
    old_token = unit.dispatch_token
    runner.pause(controlled.type())

    assert ledger.transitions.claim(unit.id, old_token) is None
    assert ledger.transitions.pending_with(unit.id, old_token) is False

    runner.resume(controlled.type())
    assert (
        ledger.transitions.claim(unit.id, old_token) is None
    )  # superseded by the resume's dispatch
    new_token = units_of(handle.uuid)["k1"].dispatch_token
    assert new_token != old_token
    claim = ledger.transitions.claim(unit.id, new_token)
    assert claim is not None and claim.attempts == 1


def test_pause_and_resume_refuse_what_they_cannot_do(ctx, controlled):
    with pytest.raises(Refused, match="not registered"):
        runner.pause("no.such.type")
    with pytest.raises(Refused, match="not registered"):
        runner.resume("no.such.type")
    # Resuming a type that is not paused, as pausing one that is, does nothing and says so.
    assert runner.resume(controlled.type()) is None


def test_a_group_retry_takes_only_that_groups_failed_units(inline_ctx, controlled):
    controlled.failing = {"k1", "k2", "k3"}
    controlled.during = lambda unit: (
        (_ for _ in ()).throw(ConnectionError("db")) if (unit.key == "k3") else None
    )
    handle = runner.start(controlled.type(), {"units": 4}, "test")
    run = ledger.runs.get_run(handle.uuid)
    groups = {g.reason: g for g in ledger.errors.error_groups(run)}
    assert set(groups) == {"unit k# broke", next(r for r in groups if r.startswith("unhandled"))}
    assert groups["unit k# broke"].kind == "domain"
    vendor = next(g for g in groups.values() if g.kind == "vendor")
    assert vendor.count == 1

    controlled.failing.clear()
    controlled.during = None
    assert ledger.actions.count_retryable(run, True, reason="unit k# broke") == 2
    assert runner.retry(handle.uuid, failed_only=True, reason="unit k# broke") == 2

    units = units_of(handle.uuid)
    assert (units["k1"].status, units["k2"].status, units["k3"].status) == (
        "completed",
        "completed",
        "failed",
    )
    assert units["k3"].attempts == 1
    action = db.session.execute(select(OperatorAction.detail)).scalar_one()
    assert action["reason"] == "unit k# broke" and action["units"] == 2
    with pytest.raises(Refused, match="nothing to retry"):
        runner.retry(handle.uuid, failed_only=True, reason="no such group")


def test_a_unit_retry_takes_only_those_units_and_never_a_completed_one(inline_ctx, controlled):
    controlled.failing = {"k1", "k2"}
    handle = runner.start(controlled.type(), {"units": 3}, "test")
    controlled.failing.clear()

    assert runner.retry(handle.uuid, unit_keys=["k2", "k3"]) == 1  # k3 completed: left

    units = units_of(handle.uuid)
    assert {k: (u.status, u.attempts) for k, u in units.items()} == {
        "k1": ("failed", 1),
        "k2": ("completed", 2),
        "k3": ("completed", 1),
    }
    with pytest.raises(Refused, match="nothing to retry"):
        runner.retry(handle.uuid, unit_keys=["k3"])
    with pytest.raises(Refused, match="nothing to retry"):
        runner.retry(handle.uuid, unit_keys=["no-such-key"])


def task(name: str, task_id: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, id=task_id)


def test_the_board_holds_what_each_worker_runs_and_frees_a_dead_workers_slot():
    board = Board(2)
    board.executing("executing", task("taskrunner.run_unit", "u7." + "a" * 32))
    [running] = board.read()
    assert (running["pid"], running["task"], running["task_id"]) == (
        os.getpid(),
        "taskrunner.run_unit",
        "u7." + "a" * 32,
    )
    board.done("complete", task("taskrunner.run_unit", "u7." + "a" * 32))
    assert board.read() == []

    # A worker process that died mid-task: its slot is freed by the consumer.
    board._write_slot(1, ("999999999.1", "builder.step", "x", f"{time.time():.3f}"))
    assert len(board.read()) == 1
    board.forget_dead()
    assert board.read() == []


def test_a_workers_running_since_is_on_the_ledgers_clock_not_its_hosts(ctx, monkeypatch):
    """One clock: on a consumer host whose wall clock is a minute behind, the workers page
    said every task had run a minute longer than it had (``since`` against the ledger's
    now), and a dead worker's last unit was told from another consumer's by it."""
    board = Board(2)
    wall = time.time
    with monkeypatch.context() as skewed:
        skewed.setattr(time, "time", lambda: wall() - 60)  # this host's clock, behind
        board.executing("executing", task("taskrunner.run_unit", "u7." + "a" * 32))
    [running] = board.read()

    since = datetime.fromisoformat(running["since"].removesuffix("Z"))
    assert abs(since - utcnow()) < timedelta(seconds=5)


def test_a_consumer_row_is_upserted_shown_lost_then_forgotten_and_removed_on_stop(ctx, controlled):
    handle = runner.start(controlled.type(), {"units": 1}, "test")
    unit = units_of(handle.uuid)["k1"]
    board = Board(2)
    board.executing("executing", task("taskrunner.run_unit", f"u{unit.id}.{unit.dispatch_token}"))
    presence = Presence(ctx, ["tasks"], "process", 2, board)
    presence.beat()
    presence.beat()  # one row per consumer, however many beats

    db.session.rollback()  # this test's own read snapshot predates the consumer's writes
    [shown] = console.consumers()["consumers"]
    assert (shown["state"], shown["queues"], shown["workers"]) == ("live", ["tasks"], 2)
    [running] = shown["running"]
    assert running["unit"]["unit_key"] == "k1"
    assert running["unit"]["run_uuid"] == handle.uuid

    db.session.execute(
        update(ConsumerPresence).values(heartbeat_at=utcnow() - timedelta(minutes=5))
    )
    db.session.commit()
    [lost] = console.consumers()["consumers"]
    assert lost["state"] == "lost" and lost["running"] == []

    # Another consumer's beat forgets rows older than the retention.
    db.session.execute(update(ConsumerPresence).values(heartbeat_at=utcnow() - timedelta(hours=2)))
    db.session.commit()
    other = Presence(ctx, ["builder"], "thread", 1, Board(2))
    other.beat()
    db.session.rollback()
    assert [c["queues"] for c in console.consumers()["consumers"]] == [["builder"]]
    other.stop()
    db.session.rollback()
    assert console.consumers()["consumers"] == []


def test_the_throughput_roll_up_counts_each_minute_once_and_marks_quiet_ones(ctx, controlled):
    now = utcnow().replace(second=30, microsecond=0)
    finished = {"a": now - timedelta(minutes=3), "b": now - timedelta(minutes=3)}
    finished |= {"c": now - timedelta(minutes=1), "d": now - timedelta(hours=2)}
    run_uuid = finished_run(controlled.type(), list(finished), {"b": "broke", "c": "broke"})
    run = ledger.runs.get_run(run_uuid)
    for key, at in finished.items():
        db.session.execute(
            update(TaskRunUnit)
            .where(TaskRunUnit.task_run_id == run.id, TaskRunUnit.unit_key == key)
            .values(finished_at=at)
        )
    db.session.execute(update(TaskRun).where(TaskRun.id == run.id).values(finished_at=now))
    db.session.commit()

    assert ledger.throughput.roll(now) == 25 * 60
    assert ledger.throughput.roll(now) == 0  # nothing new: no minute counted twice

    # The last rolled minute ended 30 s before ``now``: it is the one of unit c.
    counts = ledger.throughput.finished_by_type(now)
    assert counts["as_of"] == now.replace(second=0)
    assert counts["types"] == {
        controlled.type(): {
            "completed_minute": 0,
            "failed_minute": 1,
            "completed_hour": 1,
            "failed_hour": 2,
        }
    }
    rows = db.session.execute(select(UnitThroughput)).scalars().all()
    assert sum(r.completed + r.failed for r in rows) == 4  # d is older than an hour, kept
    # A minute later, only that minute is rolled; a day later, old rows are forgotten.
    assert ledger.throughput.roll(now + timedelta(minutes=1)) == 1
    ledger.throughput.roll(now + timedelta(hours=30))
    db.session.rollback()
    oldest = db.session.execute(select(func.min(UnitThroughput.minute))).scalar_one()
    assert oldest >= now + timedelta(hours=5) - timedelta(minutes=1)


def test_a_paused_types_waiting_units_are_not_reported_never_started(ctx, controlled):
    handle = runner.start(controlled.type(), {"units": 2}, "test")
    later = utcnow() + timedelta(hours=5)  # past "never started", inside the drain horizon
    run = ledger.runs.get_run(handle.uuid)
    assert (
        ledger.counts.run_counts(run, later)["stale"] == 2
    )  # lost by the queue, as far as anyone knows

    runner.pause(controlled.type())

    assert ledger.counts.run_counts(run, later)["stale"] == 0
    assert ledger.fleet.stale_units_page(now=later).items == []
    assert ledger.sweeps.mark_stuck(now=later) == 0
    assert ledger.runs.count_events("tasks.unit.stuck") == 0


def test_a_retention_shorter_than_the_lost_window_never_forgets_a_live_consumer(make_app):
    # Retention 0 (or a minute, with a long beat): forgotten as soon as lost, not while live.
    app = make_app(CONSUMER_RETENTION_MINUTES=0, CONSUMER_HEARTBEAT_SECONDS=60)
    with app.app_context():
        live = Presence(app, ["tasks"], "process", 2, Board(4))
        live.beat()
        # Its last beat was a little while ago, well within three beats: it is live.
        db.session.execute(
            update(ConsumerPresence).values(heartbeat_at=utcnow() - timedelta(seconds=90))
        )
        db.session.commit()
        other = Presence(app, ["builder"], "thread", 1, Board(2))
        other.beat()

        db.session.rollback()
        shown = {tuple(c["queues"]): c["state"] for c in console.consumers()["consumers"]}
        assert shown == {("tasks",): "live", ("builder",): "live"}

        # Lost (three beats silent): the next beat of any consumer forgets it.
        db.session.execute(
            update(ConsumerPresence)
            .where(ConsumerPresence.id == live.id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=181))
        )
        db.session.commit()
        last = Presence(app, ["io"], "thread", 1, Board(2))
        last.beat()
        db.session.rollback()
        assert {tuple(c["queues"]) for c in console.consumers()["consumers"]} == {
            ("builder",),
            ("io",),
        }
        for presence in (live, other, last):
            presence.stop()


def test_a_consumer_started_before_its_ledger_answers_registers_once_it_does(base_config, tmp_path):
    from sqlalchemy import create_engine

    from app import create_app
    from tests.support import wait_for

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    # Made outside make_app: its database has no tables to empty after the test.
    app = create_app({**base_config, "SQLALCHEMY_DATABASE_URI": url})
    app.config["CONSUMER_HEARTBEAT_SECONDS"] = 0.1
    presence = Presence(app, ["tasks"], "process", 1, Board(2))
    # Its ledger cannot answer yet (a deploy runs the migration after the consumers
    # started, or the database is briefly down): the consumer still serves its queue.
    presence.start()
    ledger_db = create_engine(url)
    ConsumerPresence.__table__.create(ledger_db)
    try:

        def registered() -> list[str]:
            with ledger_db.connect() as conn:
                return list(conn.execute(select(ConsumerPresence.id)).scalars())

        assert wait_for(registered, timeout=30) == [presence.id]
    finally:
        presence.stop()
        ledger_db.dispose()
    with ledger_db.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ConsumerPresence)).scalar() == 0


def test_a_consumer_stopped_while_its_heartbeat_waits_for_the_database_leaves_no_row(make_app):
    if BACKEND != "sqlite":
        pytest.skip("holds the SQLite file's write lock")
    app = make_app(CONSUMER_HEARTBEAT_SECONDS=0.1)
    with app.app_context():
        presence = Presence(app, ["tasks"], "process", 1, Board(2))
        said: list[tuple[str, str, str]] = []

        def note(when: str):
            def listener(_conn, _cursor, statement, *_args) -> None:
                said.append((when, threading.current_thread().name, statement.split()[0]))

            return listener

        event.listen(presence.engine, "before_cursor_execute", note("sent"))
        event.listen(presence.engine, "after_cursor_execute", note("done"))
        presence.start()
        holder = sqlite3.connect(db.engine.url.database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        time.sleep(0.5)  # the next beat waits for the lock, inside its upsert
        stopping = threading.Thread(target=presence.stop, name="stop")
        stopping.start()
        time.sleep(0.3)
        holder.execute("COMMIT")
        holder.close()
        stopping.join(timeout=30)
        time.sleep(0.3)

        # The stop's delete comes after the beat under way: it would write the row again,
        # a consumer stopped cleanly shown lost three beats later.
        deleted = said.index(("sent", "stop", "DELETE"))
        assert [s for s in said[deleted:] if s[1] == "consumer-presence"] == []
        db.session.rollback()
        rows = db.session.execute(select(func.count()).select_from(ConsumerPresence))
        assert rows.scalar() == 0
