"""A run whose last close was lost with its worker is closed by the stuck sweep."""

from __future__ import annotations

from datetime import timedelta

from database import utcnow
from diagnostics.probe import TYPE, ProbeTask
from taskrunner.ledger import ledger


def test_a_run_settled_without_its_close_is_closed_once_by_the_stuck_sweep(make_app):
    app = make_app()
    with app.app_context():
        context = {"units": 3}
        dispatch = ledger.transitions.create_run(
            TYPE, context, "test", ProbeTask().units(context), 100
        )
        # Every unit completes, but the worker dies before finalizing the run.
        for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, 10):
            assert ledger.transitions.complete(ledger.transitions.claim(unit_id, dispatch.token))
        assert ledger.runs.get_run(dispatch.run_uuid).status == "running"
        assert ledger.sweeps.close_settled_runs() == []  # still within a worker's lost interval

        # The sweep, once a lost worker's interval (three heartbeats) has passed.
        seconds = 3 * app.config["TASK_RUNNER_HEARTBEAT_SECONDS"] + 1
        ledger.sweeps.mark_stuck(now=utcnow() + timedelta(seconds=seconds))
        # The periodic sweep after it (the command) finds nothing more to do.
        result = app.test_cli_runner().invoke(args=["tasks", "detect-stuck"])
        assert result.exit_code == 0, result.output
        ledger.session.rollback()

        run = ledger.runs.get_run(dispatch.run_uuid)
        assert (run.status, run.units_completed) == ("completed", 3)
        assert ledger.runs.count_events("tasks.run.completed", run) == 1
        assert ledger.sweeps.close_settled_runs() == []
        assert ledger.runs.count_events("tasks.run.completed", run) == 1
