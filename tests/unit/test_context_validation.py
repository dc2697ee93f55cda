"""A run's context is checked by its task type before the run exists: a key missing,
misspelt or of another kind is refused as a context error (one line in the CLI, a 400
problem body on the web) and leaves no row; "dispatch failed" means a dispatch failed."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
import webtest
from sqlalchemy import func, select

from extensions import db
from payments.statements import MonthlyStatementsTask
from taskrunner import runner
from taskrunner.contract import ContextError, check_context, start_run
from taskrunner.models import TaskRun
from tests.factories import ControlledTask
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token


def runs() -> int:
    db.session.rollback()
    return db.session.execute(select(func.count()).select_from(TaskRun)).scalar_one()


@pytest.mark.parametrize(
    ("type_", "context", "line"),
    [
        (
            "diagnostics.probe",
            {"unitz": 3},
            "error: diagnostics.probe has no context key 'unitz' (it reads crash_every, "
            "fail_every, sleep_ms, units, vendor_fail_every)",
        ),
        (
            "diagnostics.probe",
            {"units": "three"},
            "error: diagnostics.probe: the context key 'units' must be a whole number, not str",
        ),
        (
            "diagnostics.probe",
            {"units": 2, "fail_every": -1},
            "error: diagnostics.probe: the context key 'fail_every' must not be negative",
        ),
        (
            "diagnostics.probe",
            {"units": 10**12},
            "error: diagnostics.probe: at most 10,000,000 units, not 1,000,000,000,000",
        ),
        (
            # Every unit slept the sleep no clock can hold: each crashed on an OverflowError.
            "diagnostics.probe",
            {"units": 2, "sleep_ms": 10**24},
            "error: diagnostics.probe: the context key 'sleep_ms' is at most 86,400,000 "
            "(a day), not 1,000,000,000,000,000,000,000,000",
        ),
        (
            "diagnostics.effects",
            {"units": 1, "sleep_ms": 86_400_001},
            "error: diagnostics.effects: the context key 'sleep_ms' is at most 86,400,000 "
            "(a day), not 86,400,001",
        ),
        (
            "diagnostics.vendor_probe",
            {"units": 2.5},
            "error: diagnostics.vendor_probe: the context key 'units' must be a whole number, "
            "not float",
        ),
        (
            "payments.monthly_statements",
            {},
            "error: payments.monthly_statements needs the context key 'period'",
        ),
        (
            "payments.monthly_statements",
            {"period": "2026-13"},
            "error: payments.monthly_statements: period must be YYYY-MM, not '2026-13'",
        ),
        (
            "payments.monthly_statements",
            {"period": "9990-01"},
            "error: payments.monthly_statements: the period 9990-01 has not ended yet",
        ),
        (
            "payments.monthly_statements",
            {"period": "2026-01", "tenant_id": 10**23},
            "error: payments.monthly_statements: the context key 'tenant_id' must be a tenant id",
        ),
        (
            # A tenant that does not exist: a run of no unit would complete as if done.
            "payments.monthly_statements",
            {"period": "2026-01", "tenant_id": 424242},
            "error: payments.monthly_statements: no tenant 424242",
        ),
        (
            "diagnostics.effects",
            {"units": 10**12},
            "error: diagnostics.effects: at most 10,000,000 units, not 1,000,000,000,000",
        ),
        (
            "diagnostics.effects",
            {"units": 3, "sleep_ms": -5},
            "error: diagnostics.effects: the context key 'sleep_ms' must not be negative",
        ),
        (
            "diagnostics.effects",
            {"units": "3"},
            "error: diagnostics.effects: the context key 'units' must be a whole number, not str",
        ),
        (
            "diagnostics.effects",
            {"units": 3, "batch": "b" * 65},
            "error: diagnostics.effects: the context key 'batch' is over 64 characters",
        ),
        (
            "payments.monthly_statements",
            {"period": "2026-01", "tenant": 4},
            "error: payments.monthly_statements has no context key 'tenant' (it reads "
            "period, tenant_id)",
        ),
    ],
)
def test_the_cli_refuses_a_context_its_type_refuses_in_one_line_and_writes_no_run(
    ctx, cli, type_, context, line
):
    result = cli.invoke(args=["tasks", "start", type_, "--context", json.dumps(context)])

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [line]
    assert "dispatch failed" not in result.output and runs() == 0


def test_code_that_starts_a_run_meets_the_same_check(ctx):
    with pytest.raises(ContextError, match="needs the context key 'period'"):
        start_run("payments.monthly_statements", {"tenant_id": 3})
    with pytest.raises(ContextError, match="must be a whole number, not bool"):
        runner.start("diagnostics.probe", {"units": True}, "test")
    assert runs() == 0
    assert runner.start("diagnostics.probe", {"units": 2, "sleep_ms": 0}, "test").units_total == 2


def test_the_web_meets_the_same_check_and_answers_a_400_problem(app, monkeypatch):
    """The tenant API starts a one-tenant statements run: a context its type refuses is the
    tenant's 400 problem body, with no run."""

    def refuse(self, context):
        raise ContextError("payments.monthly_statements: refused for the test")

    monkeypatch.setattr(MonthlyStatementsTask, "validate", refuse)
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
    res = webtest.TestApp(app).post_json(
        "/api/v1/statements/requests", {"period": PERIOD}, headers=bearer(token), status=400
    )

    assert res.content_type == "application/problem+json"
    assert res.json["detail"] == "payments.monthly_statements: refused for the test"
    with app.app_context():
        assert runs() == 0


def test_a_context_check_names_the_first_problem_it_finds():
    check_context("t", {"a": 1, "b": "x"}, required={"a": int}, optional={"b": str})
    with pytest.raises(ContextError, match="has no context key 'c'"):
        check_context("t", {"a": 1, "c": 2}, required={"a": int})
    with pytest.raises(ContextError, match="it reads no context"):
        check_context("t", {"a": 1})


# What no JSON column holds as it was given, or PostgreSQL refuses (a NUL, a lone
# surrogate, NaN), and what a page cannot write out (a lone surrogate: every run page 500).
UNSTORABLE = [
    ({"units": 1, "batch": "a\ud800b"}, "the context key 'batch' holds a lone surrogate"),
    ({"units": 1, "batch": "a\x00b"}, "the context key 'batch' holds a NUL character"),
    ({"units": 1, "x": [{"y": "\udfff"}]}, "the context key 'x' holds a lone surrogate"),
    ({"units": 1, "x\x00": 1}, "the context key 'x\\x00' holds a NUL character"),
]
UNSTORABLE_IN_CODE = [
    ({"units": 1, "x": math.nan}, "the context key 'x' holds nan, not a finite number"),
    ({"units": 1, "x": [math.inf]}, "the context key 'x' holds inf, not a finite number"),
    ({"units": 1, "x": datetime(2026, 1, 1)}, "the context key 'x' holds a datetime, not JSON"),
    ({"units": 1, "x": {1, 2}}, "the context key 'x' holds a set, not JSON"),
    ({"units": 1, 5: 1}, "a context key must be a text, not int"),
    ({"units": 1, "x": {(1, 2): 1}}, "the context key 'x' holds a key that is tuple, not a text"),
    ("units", "the context must be a JSON object, not str"),
]


@pytest.mark.parametrize(("context", "named"), UNSTORABLE)
def test_a_context_the_ledger_cannot_store_is_refused_in_one_line_with_no_run(
    make_app, context, named
):
    make_app.register(ControlledTask())
    app = make_app()
    result = app.test_cli_runner().invoke(
        args=["tasks", "start", "tests.controlled", "--context", json.dumps(context)]
    )

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [f"error: tests.controlled: {named}"]
    with app.app_context():
        assert runs() == 0


@pytest.mark.parametrize(("context", "named"), UNSTORABLE + UNSTORABLE_IN_CODE)
def test_code_that_starts_a_run_with_a_context_no_ledger_stores_meets_a_context_error(
    make_app, context, named
):
    make_app.register(ControlledTask())
    with make_app().app_context():
        with pytest.raises(ContextError) as refused:
            start_run("tests.controlled", context, "test")
        assert str(refused.value) == f"tests.controlled: {named}"
        assert runs() == 0


def test_a_run_whose_context_names_a_dispatch_uuid_is_retried_like_any_other(make_app):
    # A type's own context key of that name made its run pass for a single tracked job,
    # whose retries belong to its queue: tasks retry refused it.
    task = ControlledTask()
    task.failing.add("k1")
    make_app.register(task)
    with make_app(QUEUE_IMMEDIATE=True).app_context():
        handle = start_run("tests.controlled", {"units": 2, "dispatch_uuid": "batch-7"}, "test")
        task.failing.clear()

        assert runner.retry(handle.uuid) == 1
        assert runner.ended_within(handle.uuid, 5) == "completed"
