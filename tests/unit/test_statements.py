"""The monthly statements sweep: eligibility, idempotency, the command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime

import pytest
from sqlalchemy import func, select

from database import utcnow
from extensions import db
from harness import ROOT
from payments.models import Statement
from payments.statements import eligible_tenants, generate_statement
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun
from tenancy.models import Tenant


def add_tenants(*specs: tuple[str, datetime]) -> list[int]:
    tenants = [
        Tenant(name=f"t{i}", status=status, status_changed_at=changed)
        for i, (status, changed) in enumerate(specs)
    ]
    db.session.add_all(tenants)
    db.session.commit()
    return [t.id for t in tenants]


def test_only_tenants_in_standing_before_the_period_ended_are_eligible(ctx):
    ids = add_tenants(
        ("active", datetime(2026, 1, 5)),
        ("past_due", datetime(2026, 9, 30)),
        ("suspended", datetime(2026, 1, 5)),
        ("active", datetime(2026, 10, 1)),  # joined after September ended
        ("closed", datetime(2025, 1, 1)),
    )

    assert list(eligible_tenants("2026-09")) == [ids[0], ids[1]]


def test_a_statement_is_generated_once_per_tenant_and_period(ctx):
    first = generate_statement(42, "2026-10")
    again = generate_statement(42, "2026-10")
    other = generate_statement(42, "2026-11")

    assert first.id == again.id and first.total_cents == again.total_cents
    assert other.id != first.id
    assert db.session.scalar(select(func.count()).select_from(Statement)) == 2


def test_the_sweep_makes_one_statement_per_eligible_tenant_even_when_run_twice(inline_ctx, cli):
    ids = add_tenants(*[("active", datetime(2026, 1, 1))] * 5, ("suspended", datetime(2026, 1, 1)))
    runner = inline_ctx.test_cli_runner()

    for _ in range(2):
        result = runner.invoke(
            args=["payments", "generate-monthly-statements", "--period", "2026-10"]
        )
        assert result.exit_code == 0, result.stderr
        run = ledger.runs.get_run(result.stdout.strip().splitlines()[-1])
        assert (run.status, run.units_total, run.units_completed) == ("completed", 5, 5)

    assert db.session.scalar(select(func.count()).select_from(Statement)) == 5
    db.session.rollback()
    units = ledger.runs.run_units_page(run, limit=10).items
    assert {u["tenant_id"] for u in units} == set(ids[:5])


def test_a_malformed_period_is_a_usage_error(cli):
    result = cli.invoke(args=["payments", "generate-monthly-statements", "--period", "2026-13"])

    assert result.exit_code == 2
    assert "YYYY-MM" in result.stderr


def test_a_period_not_ended_is_a_usage_error_and_starts_nothing(app, cli):
    this_month = utcnow().strftime("%Y-%m")
    for period in (this_month, "9990-01"):
        result = cli.invoke(args=["payments", "generate-monthly-statements", "--period", period])

        assert result.exit_code == 2, result.output
        assert f"the period {period} has not ended yet" in result.stderr
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(TaskRun)) == 0


def test_a_sweep_whose_queue_is_down_is_one_line_on_stderr_and_its_run_fails(make_app):
    # Nothing listens on port 1: the run is recorded, then its jobs cannot be enqueued.
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    with app.app_context():
        add_tenants(("active", datetime(2025, 1, 5)))
        result = app.test_cli_runner().invoke(
            args=["payments", "generate-monthly-statements", "--period", "2025-11"]
        )

        assert result.exit_code == 1, result.exception
        assert result.stderr.startswith("error: dispatch failed: ")
        assert len(result.stderr.strip().splitlines()) == 1
        db.session.rollback()
        assert db.session.scalars(select(TaskRun.status)).all() == ["failed"]


@pytest.mark.skipif(shutil.which("faketime") is None, reason="Debian's faketime is needed")
def test_the_monthly_schedule_starts_the_month_that_ended_in_utc_whatever_the_hosts_zone():
    # Huey fires the crontab at 02:00 UTC on the 1st: in New York it is still the 30th
    # of the month before, whose local "last month" is the one before that again.
    body = (
        "import payments.statements as s;"
        "s.start_monthly_statements = lambda period, initiator: print(period);"
        "s.monthly_statements()"
    )
    started = subprocess.run(
        ["faketime", "2026-11-30 21:30:00", sys.executable, "-c", body],
        env={**os.environ, "TZ": "America/New_York"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["2026-11"]


def test_a_sweep_of_one_tenant_says_one_unit(inline_ctx):
    add_tenants(("active", datetime(2026, 1, 1)))

    result = inline_ctx.test_cli_runner().invoke(
        args=["payments", "generate-monthly-statements", "--period", "2026-10"]
    )

    assert result.exit_code == 0, result.stderr
    assert "started payments.monthly_statements for 2026-10: 1 unit\n" in result.stderr
