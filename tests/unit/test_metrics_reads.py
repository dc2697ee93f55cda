"""What a scrape of ``GET /metrics`` reads, against the ledger's own answers.

Every figure is compared with what the unit rows, the pages or the periodic claims say
of the same state, through the states that would catch a shortcut: closed runs read from
their snapshot, a running run counted live, a closed run reopened by a retry (its
snapshot stale while it runs), a cancelled run, pruned runs, stale units judged at a
moment past their thresholds, a paused type, a type routed to another queue.
"""

from __future__ import annotations

import socket
import threading
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from database import utcnow
from extensions import db
from taskrunner import console, delivery, metrics, runner
from taskrunner.ledger import LedgerMetrics, ledger
from taskrunner.models import TaskRun, TaskRunUnit
from tasks.presence import Board, ConsumerPresence, Presence
from tasks.routing import routes
from tests.factories import ControlledTask
from tests.interleave import Hold, InThread


def live_unit_counts() -> dict[tuple[str, str], int]:
    """Units per (run type, unit status) counted row by row: what the scrape must equal."""
    rows = db.session.execute(
        select(TaskRun.type, TaskRunUnit.status, func.count())
        .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
        .where(TaskRun.deleted_at.is_(None), TaskRunUnit.deleted_at.is_(None))
        .group_by(TaskRun.type, TaskRunUnit.status)
    ).all()
    db.session.rollback()
    return {(type_, status): n for type_, status, n in rows}


def nonzero(figures: dict) -> dict:
    return {key: n for key, n in figures.items() if n}


def settle(run_uuid: str, outcomes: dict[str, str | None]) -> None:
    """Claim the named units of a started run; complete them (None) or fail them (a reason).

    Units not named stay pending; a key mapped to ``"running"`` is claimed and left running.
    """
    run = ledger.runs.get_run(run_uuid)
    units = db.session.execute(
        select(TaskRunUnit.id, TaskRunUnit.unit_key, TaskRunUnit.dispatch_token).where(
            TaskRunUnit.task_run_id == run.id, TaskRunUnit.status == "pending"
        )
    ).all()
    db.session.rollback()
    for unit_id, key, token in units:
        if key not in outcomes:
            continue
        claimed = ledger.transitions.claim(unit_id, token)
        assert claimed is not None
        if outcomes[key] == "running":
            continue
        if outcomes[key] is None:
            ledger.transitions.complete(claimed)
        else:
            ledger.transitions.fail(claimed, outcomes[key])
    ledger.transitions.finalize(run.id)
    db.session.remove()


def test_units_of_closed_running_reopened_and_cancelled_runs_match_their_rows(ctx, controlled):
    closed = runner.start(controlled.type(), {"units": 5}, "test")
    settle(closed.uuid, {"k1": None, "k2": None, "k3": None, "k4": "broke", "k5": "broke"})
    reopened = runner.start(controlled.type(), {"units": 4}, "test")
    settle(reopened.uuid, {"k1": None, "k2": "broke", "k3": "broke", "k4": "broke"})
    # A retry puts the failed units back to pending: the run's snapshot (1 completed,
    # 3 failed) is stale from here on, and only its rows tell.
    assert runner.retry(reopened.uuid) == 3
    settle(reopened.uuid, {"k2": None, "k3": "running"})
    running = runner.start(controlled.type(), {"units": 6}, "test")
    settle(running.uuid, {"k1": None, "k2": "broke", "k3": "running"})
    cancelled = runner.start(controlled.type(), {"units": 3}, "test")
    settle(cancelled.uuid, {"k1": None})
    runner.cancel(cancelled.uuid)

    scrape = metrics.read()

    assert nonzero(scrape.units) == live_unit_counts()
    type_ = controlled.type()
    # Per run: closed, reopened, running, cancelled.
    assert nonzero(scrape.units) == {
        (type_, "completed"): 3 + 2 + 1 + 1,
        (type_, "failed"): 2 + 0 + 1 + 0,
        (type_, "pending"): 0 + 1 + 3 + 0,
        (type_, "running"): 0 + 1 + 1 + 0,
        (type_, "skipped"): 0 + 0 + 0 + 2,
    }
    assert nonzero(scrape.runs) == {
        (type_, "completed_with_failures"): 1,
        (type_, "running"): 2,
        (type_, "cancelled"): 1,
    }


def test_a_unit_that_settles_during_a_scrape_is_counted_once(app, controlled):
    """The scrape reads one snapshot: a unit failing between its reads of the running
    run's active units and of its failed ones is not both running and failed."""
    with app.app_context():
        dispatch = ledger.transitions.create_run(
            controlled.type(), {}, "test", controlled.units({"units": 3}), 100
        )
        [first, *_] = ledger.transitions.dispatch_batch(dispatch, 0, 3)
        claimed = ledger.transitions.claim(first, dispatch.token)
        before = nonzero(metrics.read().units)
        engine = db.engine
    assert before == {(controlled.type(), "running"): 1, (controlled.type(), "pending"): 2}

    def counting_failed(statement: str) -> bool:
        return "task_run_units.task_run_id, task_run_units.status, count(*)" in statement

    with Hold(engine, "scrape", counting_failed) as hold:
        scrape = InThread(app, "scrape", metrics.read)
        hold.wait_reached()  # it has read the run's active units
        with app.app_context():
            assert ledger.transitions.fail(claimed, "broke while the scrape ran")
        hold.release()
        read = scrape.join()

    assert scrape.error is None
    assert nonzero(read.units) == before
    with app.app_context():
        assert nonzero(metrics.read().units) == {
            (controlled.type(), "failed"): 1,
            (controlled.type(), "pending"): 2,
        }


def test_every_registered_type_has_every_status_even_at_zero(ctx, controlled):
    scrape = metrics.read()

    assert scrape.units[(controlled.type(), "failed")] == 0
    assert scrape.runs[(controlled.type(), "failed")] == 0
    assert {status for (type_, status) in scrape.runs if type_ == controlled.type()} == {
        "running",
        "completed",
        "completed_with_failures",
        "failed",
        "cancelled",
    }


def test_pruned_runs_leave_the_gauges(ctx, controlled):
    old = runner.start(controlled.type(), {"units": 2}, "test")
    settle(old.uuid, {"k1": None, "k2": "broke"})
    db.session.execute(
        update(TaskRun).values(finished_at=utcnow() - timedelta(days=40), started_at=utcnow())
    )
    db.session.commit()
    assert metrics.read().runs[(controlled.type(), "completed_with_failures")] == 1

    runner.prune(days=30)

    scrape = metrics.read()
    assert scrape.runs[(controlled.type(), "completed_with_failures")] == 0
    assert nonzero(scrape.units) == {}
    assert scrape.last_finished == {}


def test_the_newest_close_per_type_and_status(ctx, controlled):
    first = runner.start(controlled.type(), {"units": 1}, "test")
    settle(first.uuid, {"k1": "broke"})
    second = runner.start(controlled.type(), {"units": 1}, "test")
    settle(second.uuid, {"k1": "broke"})
    done = runner.start(controlled.type(), {"units": 1}, "test")
    settle(done.uuid, {"k1": None})
    finishes = {
        uuid: at for uuid, at in db.session.execute(select(TaskRun.uuid, TaskRun.finished_at))
    }

    last = metrics.read().last_finished

    assert last == {
        (controlled.type(), "failed"): max(finishes[first.uuid], finishes[second.uuid]),
        (controlled.type(), "completed"): finishes[done.uuid],
    }


def test_run_durations_of_the_last_day_fall_in_cumulative_buckets(ctx, controlled):
    now = utcnow()
    took = {"3s": 3, "45s": 45, "20min": 1200, "yesterday": 60}
    uuids = {}
    for name in took:
        handle = runner.start(controlled.type(), {"units": 1}, "test")
        settle(handle.uuid, {"k1": "broke" if name == "45s" else None})
        uuids[name] = handle.uuid
    for name, seconds in took.items():
        finished = now - (timedelta(hours=25) if name == "yesterday" else timedelta(minutes=1))
        db.session.execute(
            update(TaskRun)
            .where(TaskRun.uuid == uuids[name])
            .values(finished_at=finished, started_at=finished - timedelta(seconds=seconds))
        )
    db.session.commit()

    scrape = metrics.read(now)

    by_status = {d.status: d for d in scrape.durations if d.type == controlled.type()}
    assert set(by_status) == {"completed", "failed"}
    bounds = scrape.duration_bounds
    completed, failed = by_status["completed"], by_status["failed"]
    assert completed.count == 2  # the run closed 25 h ago is out of the window
    assert completed.total_seconds == pytest.approx(1203, abs=0.01)
    assert dict(zip(bounds, completed.buckets, strict=True)) == {
        b: (b >= 3) + (b >= 1200) for b in bounds
    }
    assert failed.count == 1
    assert dict(zip(bounds, failed.buckets, strict=True)) == {b: int(b >= 45) for b in bounds}


def test_stale_units_per_reason_agree_with_the_stale_page(ctx, controlled):
    handle = runner.start(controlled.type(), {"units": 4}, "test")
    settle(handle.uuid, {"k1": "running", "k2": "running"})
    t0 = utcnow()
    db.session.execute(
        update(TaskRunUnit).where(TaskRunUnit.unit_key == "k2").values(heartbeat_at=t0)
    )
    db.session.commit()
    later = t0 + timedelta(minutes=31)  # the controlled type's 30 min, k1's heartbeat long gone
    db.session.execute(
        update(TaskRunUnit).where(TaskRunUnit.unit_key == "k2").values(heartbeat_at=later)
    )
    db.session.commit()

    assert metrics.read(t0).stale_units == {
        "worker lost": 0,
        "running too long": 0,
        "never started": 0,
    }
    scrape = metrics.read(later)

    page = ledger.fleet.stale_units_page(now=later).items
    shown: dict[str, int] = {}
    for unit in page:
        shown[unit["stale_reason"]] = shown.get(unit["stale_reason"], 0) + 1
    assert (
        {reason: n for reason, n in scrape.stale_units.items() if n}
        == shown
        == {
            "worker lost": 1,
            "running too long": 1,
            "never started": 2,
        }
    )


def queue_figures(scrape: metrics.Scrape) -> dict[str, metrics.QueueFigures]:
    return {queue.name: queue for queue in scrape.queues}


def test_each_queue_reads_as_the_queues_page_does(make_app, controlled):
    # Its definition names ``tasks``; the deployment's routing table sends it to io.
    routed = ControlledTask("tests.routed", queue="tasks")
    make_app.register(routed)
    app = make_app(TASK_RUNNER_TYPE_ROUTES="tests.routed=io")
    with app.app_context():
        waiting_run = runner.start(controlled.type(), {"units": 3}, "test")
        settle(waiting_run.uuid, {"k1": "running"})
        runner.start(routed.type(), {"units": 2}, "test")
        later = utcnow() + timedelta(minutes=7)

        scrape = metrics.read(later)
        page = {queue["name"]: queue for queue in console.queues()["queues"]}

    queues = queue_figures(scrape)
    assert (queues["tasks"].pending_units, queues["tasks"].running_units) == (2, 1)
    assert (queues["io"].pending_units, queues["io"].running_units) == (2, 0)
    for name in ("tasks", "io"):
        assert queues[name].pending_units == page[name]["pending_units"]
        assert queues[name].running_units == page[name]["running"]
        # The page reads the clock; the scrape was judged 7 minutes on.
        assert queues[name].oldest_pending_seconds == pytest.approx(
            page[name]["oldest_pending_seconds"] + 420, abs=3
        )
        # Nothing consumes these queues: every dispatched job still waits in them.
        assert queues[name].waiting == page[name]["waiting"]
    assert queues["tasks"].waiting == 3 and queues["io"].waiting == 2
    assert queues["builder"].pending_units == 0
    assert queues["builder"].oldest_pending_seconds == 0


def test_a_paused_types_waiting_units_are_no_long_wait(ctx, controlled):
    runner.start(controlled.type(), {"units": 2}, "test")
    later = utcnow() + timedelta(hours=2)
    assert queue_figures(metrics.read(later))["tasks"].oldest_pending_seconds > 7000

    runner.pause(controlled.type())

    scrape = metrics.read(later)
    assert queue_figures(scrape)["tasks"].oldest_pending_seconds == 0
    assert queue_figures(scrape)["tasks"].pending_units == 2
    assert scrape.paused_types == 1


def test_an_unreadable_queue_backend_is_tried_once_and_the_rest_still_reads(
    make_app, controlled, caplog
):
    # Nothing listens on port 9: every connection to it is refused at once.
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:9/0")
    with app.app_context():
        handle = ledger.transitions.create_run(
            controlled.type(), {}, "test", controlled.units({"units": 2}), 10
        )
        db.session.commit()

        scrape = metrics.read()

    assert handle.count == 2
    assert [queue.waiting for queue in scrape.queues] == [None] * len(scrape.queues)
    assert queue_figures(scrape)["tasks"].pending_units == 2
    assert scrape.units[(controlled.type(), "pending")] == 2
    assert [r.message for r in caplog.records].count("Queue default could not be counted") == 1
    assert not [r for r in caplog.records if "tasks could not be counted" in r.message]


def test_a_queue_backend_that_never_answers_reads_as_down_within_a_scrape(make_app, controlled):
    """A backend that takes the connection and never replies (a wedged Redis; a host whose
    packets are dropped waits out the connect timeout, 10 s) held the scrape past
    Prometheus' own timeout (10 s, README): the scrape failed, and backend_up 0 was never
    seen. The bound below is a client's timeout (a scrape that never answers), not a
    measurement."""
    wedged = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nothing replies
    port = wedged.getsockname()[1]
    app = make_app(
        QUEUE_DRIVER="redis",
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
        NETWORK_DEAD_PEER_SECONDS=3600,
    )
    scrapes: list[metrics.Scrape] = []

    def scrape() -> None:
        with app.app_context():
            scrapes.append(metrics.read())

    scraping = threading.Thread(target=scrape, daemon=True)
    try:
        scraping.start()
        scraping.join(timeout=30)
        assert scrapes, "the scrape never answered"
        assert [queue.waiting for queue in scrapes[0].queues] == [None] * len(scrapes[0].queues)
    finally:
        wedged.close()  # a scrape still waiting reads the end of the connection and ends
        scraping.join(timeout=30)


def test_consumers_live_and_lost_as_the_workers_page_says(app, ctx):
    Presence(app, ["tasks", "io"], "process", 2, Board(2)).beat()
    Presence(app, ["builder"], "process", 1, Board(2)).beat()
    gone = Presence(app, ["tasks"], "process", 2, Board(2))
    gone.beat()
    silent_since = utcnow() - timedelta(seconds=3 * app.config["CONSUMER_HEARTBEAT_SECONDS"] + 5)
    db.session.execute(
        update(ConsumerPresence)
        .where(ConsumerPresence.id == gone.id)
        .values(heartbeat_at=silent_since)
    )
    db.session.commit()

    scrape = metrics.read()

    page = [c["state"] for c in console.consumers()["consumers"]]
    assert scrape.consumers == {"live": page.count("live"), "lost": page.count("lost")}
    assert scrape.consumers == {"live": 2, "lost": 1}
    served = {queue.name: queue.live_consumers for queue in scrape.queues}
    assert served == {"default": 0, "tasks": 1, "builder": 1, "long-job": 0, "io": 1}


def test_parked_deliveries_are_counted(make_app, controlled):
    from taskrunner import events

    app = make_app(TASK_RUNNER_EVENT_RETRY_SECONDS=0, TASK_RUNNER_EVENT_MAX_ATTEMPTS=2)
    with app.app_context():

        def refuse(event) -> None:
            raise RuntimeError("subscriber down")

        events.subscribe("tasks.run.completed", refuse)
        handle = runner.start(controlled.type(), {"units": 1}, "test")
        settle(handle.uuid, {"k1": None})  # refusal 1, by the owner: to be retried
        assert metrics.read().parked_deliveries == 0

        assert delivery.relay(older_than_seconds=0) == 1  # refusal 2: parked

        assert metrics.read().parked_deliveries == 1


def slot_of(name: str) -> metrics.ScheduleFigures:
    [figures] = [s for s in metrics.read().schedules if s.name == name]
    return figures


def ran(name: str, slot: datetime) -> bool:
    """A slot claimed and run to its end, as a scheduler's job does."""
    won = ledger.schedules.claim(name, slot, "test:1")
    ledger.schedules.finish(name, slot, None, None)
    return won


def test_each_schedule_reads_its_newest_run_slot_and_the_slot_due_after_it(ctx):
    assert {s.name for s in metrics.read().schedules} == set(routes.periodic)
    assert slot_of("taskrunner.prune") == metrics.ScheduleFigures("taskrunner.prune", None, None)

    sweep = ctx.config["TASK_RUNNER_SWEEP_SECONDS"]
    earlier, newest = datetime(2026, 3, 1, 11, 55), datetime(2026, 3, 1, 12, 0)
    assert ran("taskrunner.detect_stuck", newest)
    assert ran("taskrunner.detect_stuck", earlier)  # run later, but an older slot
    assert ran("taskrunner.prune", datetime(2026, 3, 1, 3, 17))

    stuck, prune = slot_of("taskrunner.detect_stuck"), slot_of("taskrunner.prune")

    rows = ledger.schedules.recent(["taskrunner.detect_stuck"], 10)["taskrunner.detect_stuck"]
    finished_at = {row.slot: row.finished_at for row in rows}
    assert stuck.last_run_at == finished_at[newest]
    assert stuck.next_due_at == newest + timedelta(seconds=sweep)
    assert prune.next_due_at == datetime(2026, 3, 2, 3, 17)  # daily, at 03:17


def test_an_operators_run_now_is_a_success_but_moves_no_next_due_slot(ctx):
    name, sweep = "taskrunner.detect_stuck", ctx.config["TASK_RUNNER_SWEEP_SECONDS"]
    scheduled = datetime(2026, 3, 1, 12, 0)
    assert ran(name, scheduled)
    by_hand = scheduled + timedelta(hours=2, microseconds=250)  # no scheduler since
    assert ledger.schedules.claim(name, by_hand, "test:1", initiator="operator:ops@example.com")
    ledger.schedules.finish(name, by_hand, None, None)
    [row] = ledger.schedules.recent([name], 1)[name]
    figures = slot_of(name)
    assert figures.last_run_at == row.finished_at and row.slot == by_hand
    assert figures.next_due_at == scheduled + timedelta(seconds=sweep)


def test_a_missed_a_paused_or_a_running_slot_is_no_success(ctx):
    name = "taskrunner.detect_stuck"
    done = datetime(2026, 3, 1, 12, 0)
    assert ran(name, done)
    ledger.schedules.mark_missed(name, [done + timedelta(minutes=5)])
    ledger.schedules.claim(name, done + timedelta(minutes=10), "test:1")  # still running
    [row] = ledger.schedules.recent([name], 1)[name]
    [last] = LedgerMetrics(db.session, utcnow()).last_success([name]).values()
    assert slot_of(name).last_run_at == last.finished_at
    assert last.slot == done
    assert row.slot == done + timedelta(minutes=10)
