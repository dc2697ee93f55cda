"""The helper that forces races (``tests/interleave.py``) fails a test, never hangs it.

A held thread that the test never lets go (a hold on the wrong statement, a test that
failed before its release) times out; its transaction must end with it, or the row locks
it holds keep every later session, the fixtures' cleanup included, waiting forever.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select, text, update

from database import utcnow
from extensions import db
from taskrunner.models import TaskRun
from tests import interleave
from tests.conftest import BACKEND
from tests.interleave import Hold, InThread
from tests.web.backoffice_support import finished_run

pytestmark = pytest.mark.skipif(BACKEND != "postgres", reason="held with PostgreSQL row locks")


def touch_then_ask(run_id: int) -> None:
    """Lock the run's row, run one more statement, commit."""
    db.session.execute(update(TaskRun).where(TaskRun.id == run_id).values(finished_at=utcnow()))
    db.session.execute(text("SELECT 'after the update'"))
    db.session.commit()


@pytest.mark.parametrize(
    ("match", "at"),
    [
        (lambda statement: "after the update" in statement, ""),
        (lambda statement: statement.startswith("UPDATE task_runs"), "commit"),
    ],
    ids=["held-at-a-statement", "held-at-its-commit"],
)
def test_a_hold_never_released_ends_its_threads_transaction_and_frees_its_locks(
    race_app, monkeypatch, match, at
):
    monkeypatch.setattr(interleave, "WAIT", 0.5)
    run_uuid = finished_run("diagnostics.probe", ["probe-1"], {})
    run_id = db.session.execute(select(TaskRun.id).where(TaskRun.uuid == run_uuid)).scalar_one()
    db.session.commit()

    with Hold(db.engine, "toucher", match, at=at):
        toucher = InThread(race_app, "toucher", touch_then_ask, run_id)
        toucher.join()

    assert isinstance(toucher.error, TimeoutError)
    db.session.execute(text("SET LOCAL lock_timeout = '5s'"))
    db.session.execute(update(TaskRun).where(TaskRun.id == run_id).values(finished_at=None))
    db.session.commit()
