"""The races of a schedule slot's sweeps against its body and its late job, forced on
PostgreSQL.

The stuck sweep ends a slot whose worker it judged lost, and the watch writes a slot
handed back whose job never came missed; each reads its rows first and writes them in a
later statement, while the body may end or hand its slot back (a body judged lost that
was alive), or the job may claim its slot meanwhile. Each test holds one real session
before a chosen statement (``tests/interleave.py``), lets the other commit, or wait for
its lock, and asserts that nothing the other did is undone. On SQLite these
interleavings cannot happen: each write holds the database lock from its first
statement.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete

import taskrunner.periodic  # noqa: F401 - declares the runner's schedules
from extensions import db
from taskrunner import schedules
from taskrunner.ledger import ledger
from taskrunner.models import ScheduleSlot, ScheduleState
from tests.conftest import BACKEND
from tests.interleave import Hold, InThread, wait_until_blocked_on_a_lock

pytestmark = pytest.mark.skipif(BACKEND != "postgres", reason="forced with PostgreSQL row locks")

REPEATS = 5
SWEEP = "taskrunner.detect_stuck"  # every 300 s by default: grace 600 s
T0 = datetime(2026, 3, 1, 12, 0)
PERIOD = timedelta(seconds=300)
GRACE = timedelta(seconds=600)
KILLED = "host-a:1"  # the claimer the sweep judges lost


def writes_a_slot(statement: str) -> bool:
    return statement.startswith(("UPDATE periodic_slots SET", "INSERT INTO periodic_slots"))


def shown(slot: datetime, now: datetime) -> tuple[str, str | None]:
    db.session.rollback()
    [row] = [row for row in schedules.schedule(SWEEP, now=now).slots if row.slot_at == slot]
    return row.state, row.reason


def missed_from() -> datetime | None:
    db.session.rollback()
    return ledger.schedules.states()[SWEEP].missed_from


def end_lost(now: datetime) -> list:
    return ledger.schedules.end_lost(now, lambda claimer: claimer == KILLED, now)


def claimed() -> tuple[datetime, datetime]:
    """A slot claimed by the worker the sweep will judge lost; and a time long after.

    Each repetition starts from no schedule known: the watch's other schedules then owe
    nothing, and its count is the one slot's.
    """
    db.session.execute(delete(ScheduleSlot))
    db.session.execute(delete(ScheduleState))
    db.session.commit()
    slot = T0 + PERIOD
    assert ledger.schedules.claim(SWEEP, slot, KILLED, now=slot)
    return slot, slot + timedelta(minutes=30)


def handed_back() -> tuple[datetime, datetime]:
    """A slot handed back by a deploy; and a watch's time past its grace."""
    slot, _ = claimed()
    assert ledger.schedules.hand_back(SWEEP, slot, KILLED, now=slot) is None
    return slot, slot + GRACE + timedelta(seconds=1)


def sweep_meeting(race_app, at: datetime, meanwhile: Callable[..., Any], *args, **kwargs):
    """The stuck sweep at ``at``, held between its read (the slot unended, claimed by a
    lost worker) and its write while ``meanwhile(*args, **kwargs)`` commits: what the sweep
    ended, and what ``meanwhile`` returned."""
    with Hold(db.engine, "sweep", writes_a_slot) as hold:
        sweep = InThread(race_app, "sweep", end_lost, at)
        hold.wait_reached()
        answer = meanwhile(*args, **kwargs)
        hold.release()
        ended = sweep.join()
    assert sweep.error is None
    return ended, answer


def taken_once_by_its_job(slot: datetime, now: datetime) -> None:
    assert ledger.schedules.claim(SWEEP, slot, "host-b:2", now=now)
    assert not ledger.schedules.claim(SWEEP, slot, "host-c:3", now=now)


def test_a_body_ending_between_the_stuck_sweeps_read_and_its_write_keeps_its_end(race_app):
    for _ in range(REPEATS):
        slot, now = claimed()

        ends = ledger.schedules.finish  # the body ends
        assert sweep_meeting(race_app, now, ends, SWEEP, slot, None, "run-1", now=now)[0] == []
        assert shown(slot, now) == ("ok", None)


def test_a_stuck_sweep_waiting_for_an_ending_bodys_lock_leaves_its_end(race_app):
    for _ in range(REPEATS):
        slot, now = claimed()

        with Hold(db.engine, "body", writes_a_slot, at="commit") as hold:
            reason = "vendor answered 503"
            finish = ledger.schedules.finish
            body = InThread(race_app, "body", finish, SWEEP, slot, reason, None, now=now)
            hold.wait_reached()  # its end is written, not yet committed
            sweep = InThread(race_app, "sweep", end_lost, now)
            wait_until_blocked_on_a_lock()
            hold.release()
            body.join()
            ended = sweep.join()

        assert (body.error, sweep.error, ended) == (None, None, [])
        assert shown(slot, now) == ("failed", "vendor answered 503")


def test_a_late_job_claiming_between_the_watchs_read_and_its_write_runs_its_slot(race_app):
    for _ in range(REPEATS):
        slot, now = handed_back()

        with Hold(db.engine, "watch", writes_a_slot) as hold:
            watch = InThread(race_app, "watch", schedules.watch, now=now)
            hold.wait_reached()  # it read the slot handed back, its job not taken in time
            assert ledger.schedules.claim(SWEEP, slot, "host-b:2", now=now)  # the job came
            hold.release()
            written = watch.join()

        assert (watch.error, written) == (None, 0)
        assert shown(slot, now)[0] == "late"  # running, taken after its grace
        assert missed_from() is None  # no missed episode opened for it
        assert not ledger.schedules.claim(SWEEP, slot, "host-c:3", now=now)  # once
        ledger.schedules.finish(SWEEP, slot, None, None, now=now)


def test_a_late_job_waiting_for_the_watchs_lock_still_claims_the_slot_written_missed(race_app):
    for _ in range(REPEATS):
        slot, now = handed_back()

        with Hold(db.engine, "watch", writes_a_slot, at="commit") as hold:
            watch = InThread(race_app, "watch", schedules.watch, now=now)
            hold.wait_reached()  # the slot is written missed, not yet committed
            claim = InThread(
                race_app, "job", ledger.schedules.claim, SWEEP, slot, "host-b:2", now=now
            )
            wait_until_blocked_on_a_lock()
            hold.release()
            written = watch.join()
            took = claim.join()

        assert (watch.error, claim.error, written, took) == (None, None, 1, True)
        assert missed_from() == slot  # the watch's missed episode stands
        assert shown(slot, now)[0] == "late"  # a queue behind its graces still runs it
        assert not ledger.schedules.claim(SWEEP, slot, "host-c:3", now=now)  # once
        ledger.schedules.finish(SWEEP, slot, None, None, now=now)
        assert missed_from() is None  # and its end closes it


def test_a_hand_back_between_the_stuck_sweeps_read_and_its_write_stands(race_app):
    for _ in range(REPEATS):
        slot, now = claimed()

        hands_back = ledger.schedules.hand_back  # the body, alive, stopping
        ended, kept_run = sweep_meeting(race_app, now, hands_back, SWEEP, slot, KILLED, now=now)
        assert (ended, kept_run) == ([], None)
        assert "handed back on shutdown" in shown(slot, now)[1]
        taken_once_by_its_job(slot, now)


def test_a_hand_back_waiting_for_the_stuck_sweeps_lock_still_hands_the_slot_back(race_app):
    for _ in range(REPEATS):
        slot, now = claimed()

        with Hold(db.engine, "sweep", writes_a_slot, at="commit") as hold:
            sweep = InThread(race_app, "sweep", end_lost, now)
            hold.wait_reached()  # the slot is ended failed, not yet committed
            hand_back = ledger.schedules.hand_back
            body = InThread(race_app, "body", hand_back, SWEEP, slot, KILLED, now=now)
            wait_until_blocked_on_a_lock()
            hold.release()
            ended = sweep.join()
            kept_run = body.join()

        assert (sweep.error, body.error, len(ended), kept_run) == (None, None, 1, None)
        assert "handed back on shutdown" in shown(slot, now)[1]
        taken_once_by_its_job(slot, now)
