"""``flask demo seed``: a newcomer lands on a populated backoffice and can sign in."""

from __future__ import annotations

import re

from taskrunner.ledger import ledger
from tests.web.backoffice_support import Operator, browser, sign_in


def test_demo_seed_fills_the_backoffice_and_prints_a_working_password(app, cli):
    result = cli.invoke(args=["demo", "seed"])

    assert result.exit_code == 0, result.output
    assert "tenants created: 40" in result.output
    password = re.search(r"operator: operator@example.com  password: (\S+)", result.output)[1]
    with app.app_context():
        runs = ledger.runs.runs_page(limit=10).items
        statuses = sorted(run.status for run in runs)
        sweep = next(r for r in runs if r.type == "payments.monthly_statements")
        reasons = {g.reason for g in ledger.errors.error_groups(sweep)}
    assert statuses == [
        "cancelled",
        "completed_with_failures",
        "completed_with_failures",
        "running",
    ]
    # The numbers that vary are folded; the sweep's period is kept.
    assert "tenant # has no billing address for 2026-10" in reasons
    # Error references are folded like numbers: one group for every vendor failure.
    assert "unhandled sqlalchemy.exc.OperationalError — see logs, ref #" in reasons
    build = re.search(r"course build: /builder/runs/(\S+)", result.output)[1]
    status = cli.invoke(args=["builder", "status", build, "--json"])
    assert status.exit_code == 0 and '"stage": "outline"' in status.output

    web = browser(app)
    assert sign_in(web, Operator("operator@example.com", password)).status_int == 302
    page = web.get("/backoffice/task-runs")
    assert page.text.count("payments.monthly_statements") >= 2


def test_demo_seed_twice_keeps_the_operator_password(cli):
    cli.invoke(args=["demo", "seed"])
    again = cli.invoke(args=["demo", "seed"])
    assert again.exit_code == 0
    assert "already exists (password unchanged)" in again.output
