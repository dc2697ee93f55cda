"""The tenant API's statement requests, in-process (no consumer: the queue holds the job).

With the ordinary test app the statement job waits in the queue, so the request
stays pending; with the inline app (Huey immediate mode) the job runs inside the
request, through the same tracking wrapper a consumer uses.
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import pytest
import webtest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, update

from asyncrequests.models import AsyncRequest
from database import utcnow
from extensions import db
from payments.models import Statement
from payments.statement_requests import START_LEASE
from payments.statements import TYPE, generate_statement, start_monthly_statements
from taskrunner import runner
from taskrunner.ledger import ledger
from tests.interleave import Hold, InThread
from tests.support import see_logs
from tests.web.tenant_api_support import (
    DRIVER_SECRET,
    PERIOD,
    bearer,
    make_tenant,
    statements_table_failing,
    tenant_with_token,
)

REQUESTS = "/api/v1/statements/requests"


@pytest.fixture
def client(app):
    return webtest.TestApp(app)


@pytest.fixture
def tenant(app):
    with app.app_context():
        return tenant_with_token("Acme")


def statement_runs(app) -> list:
    with app.app_context():
        runs = ledger.runs.runs_page(limit=50, type_=TYPE).items
        return [(r.uuid, r.status, r.initiator, dict(r.context)) for r in runs]


def test_a_statement_request_is_pending_with_retry_after_and_a_location(app, client, tenant):
    tenant_id, token = tenant

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)

    body = res.json
    assert body["status"] == "pending"
    assert body["kind"] == "payments.statement"
    assert body["subject"] == PERIOD
    assert body["result"] is None and body["reason"] is None
    assert int(res.headers["Retry-After"]) > 0
    assert res.headers["Location"].endswith(f"/api/v1/async-requests/{body['id']}")
    poll = client.get(f"/api/v1/async-requests/{body['id']}", headers=bearer(token))
    assert poll.json["status"] == "pending"
    assert int(poll.headers["Retry-After"]) > 0
    runs = statement_runs(app)
    assert len(runs) == 1
    _uuid, status, initiator, context = runs[0]
    assert status == "running"
    assert initiator == f"tenant-api:{tenant_id}"
    assert context == {"period": PERIOD, "tenant_id": tenant_id}


def test_asking_again_returns_the_same_pending_request_and_starts_no_second_run(
    app, client, tenant
):
    _tenant_id, token = tenant

    first = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
    second = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)

    assert second.json["id"] == first.json["id"]
    assert len(statement_runs(app)) == 1


def test_two_asks_at_once_get_the_same_request_and_start_one_run(app, tenant):
    _tenant_id, token = tenant
    with app.app_context():
        engine = db.engine

    def ask():
        return webtest.TestApp(app).post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token))

    # The first ask is held after it found no unit in flight, right before its run reads
    # the tenant; the second asks meanwhile, and finds no unit in flight either.
    starting = lambda sql: "FROM tenants" in sql and "tenants.name" in sql  # noqa: E731
    with Hold(engine, "first", starting) as hold:
        first = InThread(app, "first", ask)
        hold.wait_reached()
        second = InThread(app, "second", ask)
        second_answer = second.join()
        hold.release()
        first_answer = first.join()

    assert (first.error, second.error) == (None, None)
    assert first_answer.status_int == second_answer.status_int == 202
    assert first_answer.json["id"] == second_answer.json["id"]
    assert len(statement_runs(app)) == 1


def test_a_request_left_pending_by_a_lost_run_is_healed_by_asking_again_after_the_lease(
    app, client, tenant
):
    _tenant_id, token = tenant
    asked = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
    [(lost, *_)] = statement_runs(app)
    with app.app_context():
        runner.cancel(lost)  # its unit will never run: the request stays pending
    # Within the lease the ask that opened it may still be starting its run.
    client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
    assert len(statement_runs(app)) == 1
    with app.app_context():
        db.session.execute(
            update(AsyncRequest).values(updated_at=utcnow() - START_LEASE - timedelta(seconds=1))
        )
        db.session.commit()

    again = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)

    assert again.json["id"] == asked.json["id"]
    runs = statement_runs(app)
    assert len(runs) == 2 and runs[0][0] != lost and runs[0][1] == "running"


def test_a_request_while_the_fleet_sweep_has_the_tenant_in_flight_starts_no_run(
    app, client, tenant
):
    _tenant_id, token = tenant
    with app.app_context():
        make_tenant("Globex")
        sweep = start_monthly_statements(PERIOD, "schedule")
    assert sweep.units_total == 2

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)

    assert res.json["status"] == "pending"
    assert [run[0] for run in statement_runs(app)] == [sweep.uuid]


def test_another_period_is_another_request_with_its_own_run(app, client, tenant):
    _tenant_id, token = tenant

    october = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token))
    november = client.post_json(REQUESTS, {"period": "2025-11"}, headers=bearer(token))

    assert october.json["id"] != november.json["id"]
    assert len(statement_runs(app)) == 2


def test_an_existing_statement_completes_the_request_at_once_without_a_run(app, client, tenant):
    tenant_id, token = tenant
    with app.app_context():
        statement_id = generate_statement(tenant_id, PERIOD).id

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=200)

    assert res.json["status"] == "completed"
    assert "Retry-After" not in res.headers
    assert res.json["result"]["statement_id"] == statement_id
    assert res.json["links"]["statement"].endswith(f"/api/v1/statements/{statement_id}")
    assert statement_runs(app) == []
    again = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=200)
    assert again.json["id"] == res.json["id"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"period": "2025-13"}, "period must be YYYY-MM"),
        ({"period": ""}, "period must be YYYY-MM"),
        ({"period": "2025-1"}, "period must be YYYY-MM"),
        ({"period": "2025-10\n"}, "period must be YYYY-MM"),
        ({"period": "\uff12\uff10\uff12\uff15-10"}, "period must be YYYY-MM"),
        ({"period": "0000-01"}, "period must be YYYY-MM"),
        ({"period": "9999-12"}, "period must be YYYY-MM"),
        ({"period": "9990-01"}, "has not ended yet"),
        ({"period": 202510}, '{"period": "YYYY-MM"}'),
        ({"month": PERIOD}, '{"period": "YYYY-MM"}'),
        ([PERIOD], '{"period": "YYYY-MM"}'),
    ],
)
def test_a_bad_request_body_is_a_400_with_a_reason_and_creates_nothing(
    app, client, tenant, body, message
):
    _tenant_id, token = tenant

    res = client.post_json(REQUESTS, body, headers=bearer(token), status=400)

    assert message in res.json["detail"]
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(AsyncRequest)) == 0
    assert statement_runs(app) == []


def test_a_body_that_is_not_json_is_a_400(client, tenant):
    _tenant_id, token = tenant

    res = client.post(REQUESTS, "period=2025-10", headers=bearer(token), status=400)

    assert res.json["error"] == "bad_request"


def test_a_tenant_out_of_standing_has_no_statement_to_ask_for(app, client):
    with app.app_context():
        from asyncrequests import tokens

        tenant_id = make_tenant("Gone", status="suspended")
        token = tokens.issue(tenant_id).token

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=400)

    assert "no statement for the period" in res.json["detail"]
    assert statement_runs(app) == []


def test_a_queue_that_is_down_fails_the_request_and_answers_503(make_app):
    # Nothing listens on port 1: the enqueue after the run's commit fails.
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    client = webtest.TestApp(app)
    with app.app_context():
        _tenant_id, token = tenant_with_token("Acme")

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=503)

    assert res.headers["Retry-After"]
    with app.app_context():
        request = db.session.execute(select(AsyncRequest)).scalar_one()
        assert request.status == "failed"
        assert see_logs(r"redis\.exceptions\.ConnectionError").fullmatch(request.reason)
        [run] = ledger.runs.runs_page(type_=TYPE).items
        # The runner's wedge guard closed the run: nothing is left waiting on a lost job.
        assert run.status == "failed"


def test_inline_the_job_completes_the_request_and_the_statement_downloads(inline_app):
    client = webtest.TestApp(inline_app)
    with inline_app.app_context():
        tenant_id, token = tenant_with_token("Acme")

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=200)

    assert res.json["status"] == "completed"
    result = res.json["result"]
    with inline_app.app_context():
        statement = db.session.execute(select(Statement)).scalar_one()
        assert (statement.tenant_id, statement.period) == (tenant_id, PERIOD)
        [run] = ledger.runs.runs_page(type_=TYPE).items
        assert (run.status, run.units_total, run.units_completed) == ("completed", 1, 1)
    assert result == {
        "statement_id": statement.id,
        "period": PERIOD,
        "total_cents": statement.total_cents,
        "currency": "EUR",
        "download_path": f"/api/v1/statements/{statement.id}",
    }
    download = client.get(result["download_path"], headers=bearer(token))
    assert download.json["total_cents"] == statement.total_cents
    assert download.json["period"] == PERIOD
    assert re.search(
        r'attachment; filename="statement-2025-10-\d+\.json"',
        download.headers["Content-Disposition"],
    )


def test_inline_a_failing_statement_job_fails_the_request_and_the_unit_with_one_reason(
    inline_app,
):
    client = webtest.TestApp(inline_app)
    with inline_app.app_context():
        _tenant_id, token = tenant_with_token("Acme")
    with statements_table_failing(inline_app):
        res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=200)
    with inline_app.app_context():
        [run] = ledger.runs.runs_page(type_=TYPE).items
        [unit] = ledger.runs.run_units_page(run, status="failed").items

    assert res.json["status"] == "failed"
    assert see_logs(r"sqlalchemy\.exc\.\w+").fullmatch(res.json["reason"])
    assert DRIVER_SECRET not in res.text
    assert unit["last_error"] == res.json["reason"]
    assert run.status == "failed"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    period=st.text(max_size=12) | st.from_regex(r"\A[0-9]{4}-[0-9]{2}\Z") | json_values,
    request_id=st.text(max_size=40),
    statement_id=st.text(alphabet="0123456789-+x", max_size=30),
)
def test_nothing_a_tenant_sends_produces_a_server_error(
    client, tenant, period, request_id, statement_id
):
    _tenant_id, token = tenant
    headers = bearer(token)

    posted = client.post_json(REQUESTS, {"period": period}, headers=headers, expect_errors=True)
    polled = client.get(
        f"/api/v1/async-requests/{quote(request_id, safe='')}", headers=headers, expect_errors=True
    )
    fetched = client.get(
        f"/api/v1/statements/{quote(statement_id, safe='')}", headers=headers, expect_errors=True
    )

    assert posted.status_int in (200, 202, 400), posted.text
    # An encoded "/" leaves an empty path segment, which routing merges with a 308.
    assert polled.status_int in ((200, 308, 404) if "/" in request_id else (200, 404)), polled.text
    assert fetched.status_int in (200, 404), fetched.text
