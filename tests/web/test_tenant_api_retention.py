"""Async requests and the task-run ledger prune on their own clocks, never each other."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
import webtest
from sqlalchemy import func, select, update

from asyncrequests.models import AsyncRequest
from config import MAX_RETENTION_DAYS, Config, ConfigError
from database import utcnow
from extensions import db
from payments.statements import TYPE
from taskrunner.ledger import ledger
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token

REQUESTS = "/api/v1/statements/requests"


@pytest.fixture
def answered(inline_app):
    """A tenant whose statement request was answered by a finished one-unit run."""
    client = webtest.TestApp(inline_app)
    with inline_app.app_context():
        _tenant_id, token = tenant_with_token("Acme")
    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=200)
    assert res.json["status"] == "completed"
    return client, token, res.json


def request_count() -> int:
    return db.session.scalar(select(func.count()).select_from(AsyncRequest))


def ledger_state() -> tuple:
    [run] = ledger.runs.runs_page(type_=TYPE).items
    return (
        run.uuid,
        run.status,
        ledger.counts.run_counts(run)["completed"],
        len(ledger.runs.run_events(run, limit=200)),
    )


def test_pruning_async_requests_leaves_the_ledger_untouched(inline_app, answered):
    with inline_app.app_context():
        before = ledger_state()

        result = inline_app.test_cli_runner().invoke(
            args=["async-requests", "prune", "--days", "0"]
        )

        assert result.exit_code == 0, result.output
        assert result.output.strip() == "pruned 1 async request"
        assert request_count() == 0
        assert ledger_state() == before
        assert before[1:3] == ("completed", 1)


def test_pruning_the_ledger_leaves_async_requests_untouched(inline_app, answered):
    client, token, request = answered
    with inline_app.app_context():
        result = inline_app.test_cli_runner().invoke(args=["tasks", "prune", "--days", "0"])

        assert result.exit_code == 0, result.output
        assert ledger.runs.runs_page(type_=TYPE).items == []
        assert request_count() == 1
    poll = client.get(f"/api/v1/async-requests/{request['id']}", headers=bearer(token))
    assert poll.json == request
    client.get(request["result"]["download_path"], headers=bearer(token), status=200)


def test_the_daily_prune_keeps_requests_younger_than_their_own_retention(make_app):
    app = make_app(ASYNC_REQUESTS_RETENTION_DAYS=7, TASK_RUNNER_RETENTION_DAYS=30)
    from asyncrequests.retention import prune_async_requests

    now = utcnow()
    ages = {
        "finished 8 days ago": ("completed", now - timedelta(days=8)),
        "failed 8 days ago": ("failed", now - timedelta(days=8)),
        "finished 6 days ago": ("completed", now - timedelta(days=6)),
        "pending, untouched for 8 days": ("pending", now - timedelta(days=8)),
        "pending since 1 day": ("pending", now - timedelta(days=1)),
    }
    with app.app_context():
        for i, (name, (status, when)) in enumerate(ages.items()):
            db.session.add(
                AsyncRequest(
                    tenant_id=1,
                    kind="payments.statement",
                    subject=f"2025-0{i + 1}",
                    status=status,
                    reason=name,
                    created_at=when,
                    updated_at=when,
                    finished_at=None if status == "pending" else when,
                )
            )
        db.session.commit()

        prune_async_requests()

        kept = set(db.session.execute(select(AsyncRequest.reason)).scalars())
    assert kept == {"finished 6 days ago", "pending since 1 day"}


def test_a_retention_no_prune_can_reckon_is_refused_at_start_and_a_century_prunes(
    make_app, monkeypatch
):
    # Beyond a century the cut-off falls before year 1: the daily prune would fail daily.
    with monkeypatch.context() as patched:
        patched.setenv("ASYNC_REQUESTS_RETENTION_DAYS", "10000000")
        with pytest.raises(ConfigError, match="^ASYNC_REQUESTS_RETENTION_DAYS must be at most"):
            Config()
    app = make_app(ASYNC_REQUESTS_RETENTION_DAYS=MAX_RETENTION_DAYS)
    from asyncrequests.retention import prune_async_requests

    with app.app_context():
        prune_async_requests()
    result = app.test_cli_runner().invoke(args=["async-requests", "prune"])
    assert (result.exit_code, result.output) == (0, "pruned 0 async requests\n")


def test_a_request_pruned_while_its_job_is_queued_is_simply_not_settled(app):
    """The job's settle finds no pending request: the statement is made, nothing fails."""
    from payments.statements import generate_for_tenant

    client = webtest.TestApp(app)
    with app.app_context():
        tenant_id, token = tenant_with_token("Acme")
    client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
    with app.app_context():
        db.session.execute(update(AsyncRequest).values(updated_at=utcnow() - timedelta(days=30)))
        db.session.commit()
        assert app.test_cli_runner().invoke(args=["async-requests", "prune"]).exit_code == 0
        assert request_count() == 0

        generate_for_tenant(tenant_id, PERIOD)

        assert request_count() == 0


def test_async_requests_reach_the_task_runner_only_through_its_public_seams():
    root = Path(__file__).resolve().parents[2]
    allowed = {"taskrunner.contract"}  # redaction included
    reached = set()
    for path in (root / "asyncrequests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            reached.update(name for name in names if name.split(".")[0] == "taskrunner")
    assert reached == allowed, reached - allowed
