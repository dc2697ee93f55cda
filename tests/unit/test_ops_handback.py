"""The hand-back handler's edges: an interrupt before the gate, and one after the unit
settled but before its run was finalized. (The SIGTERM path itself runs with real
consumers in ``tests/workers/test_ops_handback.py``.)"""

from __future__ import annotations

from huey import signals

from extensions import db
from taskrunner import runner
from taskrunner.jobs import handed_back
from taskrunner.ledger import ledger
from tasks.queues import queues


def fresh_run(run_uuid: str):
    db.session.rollback()
    return ledger.get_run(run_uuid)


def test_an_interrupt_before_the_gate_still_hands_the_unit_back_with_a_new_job(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    huey = queues().huey("tasks")
    lost_job = huey.dequeue()
    _run_id, unit_id, token, _horizon = lost_job.args

    handed_back(signals.SIGNAL_INTERRUPTED, lost_job, "tasks")

    new_job = huey.dequeue()
    assert new_job is not None and new_job.args[2] != token
    assert ledger.live_unit_tokens([(unit_id, token)]) == set()
    huey.execute(lost_job)  # the interrupted original, were it ever delivered again
    huey.execute(new_job)
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)
    [unit] = ledger.units_of(run)
    assert unit["attempts"] == 1


def test_an_interrupt_after_the_unit_settled_closes_its_run(ctx):
    handle = runner.start("diagnostics.probe", {"units": 1}, "test")
    huey = queues().huey("tasks")
    job = huey.dequeue()
    _run_id, unit_id, token, _horizon = job.args
    claim = ledger.claim(unit_id, token)
    assert ledger.complete(claim)  # ...and the interrupt came before finalize

    handed_back(signals.SIGNAL_INTERRUPTED, job, "tasks")

    assert huey.dequeue() is None
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 1)
