"""The hand-back handler's edges: an interrupt before the gate, one after the unit
settled but before its run was finalized, and a stop that a library's error (or the
app context's teardown) would hide. (The SIGTERM path itself runs with real
consumers in ``tests/workers/test_ops_handback.py``.)"""

from __future__ import annotations

from sqlalchemy import event, text

from database import write_transaction
from extensions import db
from taskrunner import runner
from taskrunner.jobs import handed_back
from taskrunner.ledger import ledger
from tasks.queues import queues
from tests.support import huey_stop_interrupt, queued_jobs


def fresh_run(run_uuid: str):
    db.session.rollback()
    return ledger.runs.get_run(run_uuid)


def test_an_interrupt_before_the_gate_still_hands_the_unit_back_with_a_new_job(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    huey = queues().huey("tasks")
    lost_job = huey.dequeue()
    _run_id, unit_id, token, _horizon = lost_job.args

    handed_back(*lost_job.args, **lost_job.kwargs)

    new_job = huey.dequeue()
    assert new_job is not None and new_job.args[2] != token
    assert ledger.transitions.live_unit_tokens([(unit_id, token)]) == set()
    huey.execute(lost_job)  # the interrupted original, were it ever delivered again
    huey.execute(new_job)
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)
    [unit] = ledger.runs.run_units_page(run).items
    assert unit["attempts"] == 1


def test_an_interrupt_after_the_unit_settled_closes_its_run(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    huey = queues().huey("tasks")
    job = huey.dequeue()
    _run_id, unit_id, token, _horizon = job.args
    claim = ledger.transitions.claim(unit_id, token)
    assert ledger.transitions.complete(claim)  # ...and the interrupt came before finalize

    handed_back(*job.args, **job.kwargs)

    assert huey.pending_count() == 0
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)


def test_a_stop_masked_by_a_library_error_hands_the_unit_back_instead_of_failing_it(
    ctx, controlled
):
    def stopped_mid_statement(_unit):
        controlled.during = None  # only the first attempt is stopped
        try:
            raise huey_stop_interrupt()  # what Huey raises in a worker it stops
        finally:
            # What SQLAlchemy's pool raised in its place, resetting the interrupted connection.
            raise RuntimeError("can't change 'autocommit' now: connection in transaction")

    controlled.during = stopped_mid_statement
    handle = runner.start(controlled.type(), {"units": 1}, "test")
    huey = queues().huey("tasks")
    job = huey.dequeue()

    huey.execute(job)  # Huey sees the interrupt: SIGNAL_INTERRUPTED, the unit is handed back

    [unit] = ledger.runs.run_units_page(fresh_run(handle.uuid)).items
    assert (unit["status"], unit["last_error"]) == ("pending", None)
    new_job = huey.dequeue()
    assert new_job is not None and new_job.args[2] != job.args[2]
    huey.execute(new_job)
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)


def test_a_stop_inside_a_commits_own_bookkeeping_hands_the_unit_back(ctx, controlled):
    # The database has committed; SQLAlchemy's session, stopped before it closed its
    # transaction, refuses the rollback the app's teardown then asks of it.
    def stop_after_the_commit(_session):
        raise huey_stop_interrupt()

    def writes_and_is_stopped_in_its_commit(_unit):
        controlled.during = None  # only the first attempt is stopped
        event.listen(db.session, "after_commit", stop_after_the_commit, once=True)
        with write_transaction(db.session):
            db.session.execute(text("SELECT 1"))

    controlled.during = writes_and_is_stopped_in_its_commit
    handle = runner.start(controlled.type(), {"units": 1}, "test")
    huey = queues().huey("tasks")
    job = huey.dequeue()

    huey.execute(job)  # Huey must see the interrupt, not the session's refusal

    [unit] = ledger.runs.run_units_page(fresh_run(handle.uuid)).items
    assert (unit["status"], unit["last_error"]) == ("pending", None)
    [new_job] = queued_jobs()
    huey.execute(new_job)
    assert fresh_run(handle.uuid).status == "completed"
