"""When the database refuses (issue 23 item 2, the web and CLI part): a page, the JSON API,
/healthz and the CLI answer an outage the way each is read, never with a 500 or a
traceback, and recover once the database is back.

Real outages: a PostgreSQL URL on a port where nothing listens (the connection is
refused, on every backend), and a real PostgreSQL backend terminated by the server
under a statement (``pg_terminate_backend``; PostgreSQL only).
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from database import database_outage
from extensions import db
from harness import ROOT, process_env
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.conftest import BACKEND, PG_URL
from tests.outage import backend_terminated_at_next_statement, refused_app, refused_url
from tests.web.backoffice_support import VIEW, Operator, browser, make_user, sign_in

RUNS = "/backoffice/task-runs"
API = "/api/v1/backoffice/task-runs"
postgres_only = pytest.mark.skipif(
    BACKEND != "postgres", reason="pg_terminate_backend needs the PostgreSQL backend"
)


@pytest.fixture
def viewer(app) -> Operator:
    with app.app_context():
        return make_user("viewer@example.com", VIEW)


def signed_in(app, outage_app, who: Operator):
    """A browser of ``outage_app`` carrying a session signed in on ``app`` (same key)."""
    healthy = browser(app)
    sign_in(healthy, who)
    web = browser(outage_app)
    for name, value in healthy.cookies.items():
        web.set_cookie(name, value)
    return web


def assert_unavailable_page(response) -> None:
    assert response.status_int == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "cannot reach its database" in response.text
    assert "Traceback" not in response.text and "SELECT" not in response.text


def assert_unavailable_problem(response) -> None:
    assert response.status_int == 503
    assert response.content_type == "application/problem+json"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json["error"] == "unavailable" and response.json["status"] == 503
    assert "SELECT" not in response.json["detail"]


def test_a_refused_connection_is_a_503_with_retry_after_on_pages_api_and_health(
    app, make_app, viewer
):
    outage = refused_app(make_app.base_config)
    web = signed_in(app, outage, viewer)

    page = web.get(RUNS, status=503)
    assert_unavailable_page(page)
    assert "refused the connection" in page.text
    assert "127.0.0.1" not in page.text  # where the database lives is not the page's to say
    assert_unavailable_problem(web.get(API, status=503))
    health = web.get("/healthz", status=503)
    assert int(health.headers["Retry-After"]) >= 1
    assert health.json == {
        "status": "unavailable",
        "database": "the database refused the connection",
    }
    # Signing in needs the database too; the form itself does not.
    form = browser(outage).get("/login", status=200).forms["login"]
    form["email"], form["password"] = viewer.email, viewer.password
    assert_unavailable_page(form.submit(status=503))


def test_a_refused_connection_in_the_cli_is_one_line_and_exit_1(app, make_app, tmp_path):
    outage = refused_app(make_app.base_config)
    for args in (["tasks", "status"], ["tasks", "start", "diagnostics.probe"], ["tenants", "list"]):
        result = outage.test_cli_runner().invoke(args=args)
        assert result.exit_code == 1, (args, result.output, result.exception)
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("error: the database refused the connection: "), line

    # The installed command line, as an operator runs it.
    env = process_env(app, DATABASE_URL=refused_url(), NETWORK_CONNECT_TIMEOUT_SECONDS="2")
    env["INSTANCE_PATH"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "tasks", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: the database refused the connection: connection failed")


def test_only_an_outage_is_answered_as_one_other_errors_stay_errors():
    refused = OperationalError("SELECT 1", {}, psycopg.OperationalError("connection refused"))
    refused.statement = None  # raised while connecting
    dropped = OperationalError(
        "SELECT 1", {}, psycopg.OperationalError("server closed"), connection_invalidated=True
    )
    assert (
        str(database_outage(refused)) == "the database refused the connection: connection refused"
    )
    assert database_outage(dropped).summary == "the database closed the connection"
    assert database_outage(PoolTimeout("QueuePool limit reached")).summary == (
        "no database connection came free"
    )
    # A bug in a statement, an integrity error, anything else: not an outage.
    assert database_outage(ProgrammingError("SELECT x", {}, Exception("no column x"))) is None
    assert database_outage(IntegrityError("INSERT", {}, Exception("duplicate key"))) is None
    assert database_outage(ValueError("bad value")) is None


@postgres_only
def test_a_backend_terminated_under_a_request_is_a_503_and_the_next_request_recovers(app, viewer):
    with app.app_context():
        run = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit("a")], 100
        ).run_uuid
        db.session.remove()
        engine = db.engine
    web = browser(app)
    sign_in(web, viewer)
    for path, check in (
        (RUNS, assert_unavailable_page),
        (f"{RUNS}/{run}", assert_unavailable_page),
        (f"{API}/{run}", assert_unavailable_problem),
    ):
        with backend_terminated_at_next_statement(engine, PG_URL) as hit:
            answer = web.get(path, status=503)
        assert hit, "no statement ran on the terminated backend"
        check(answer)
        assert "closed the connection" in answer.text
        web.get(path, status=200)  # the pool replaced the dead connection
    with backend_terminated_at_next_statement(engine, PG_URL):
        health = web.get("/healthz", status=503)
    assert health.json["database"] == "the database closed the connection"
    assert web.get("/healthz").json == {"status": "ok"}


@postgres_only
def test_a_backend_terminated_under_a_cli_command_is_one_line_and_exit_1(app):
    with app.app_context():
        engine = db.engine
    with backend_terminated_at_next_statement(engine, PG_URL):
        result = app.test_cli_runner().invoke(args=["tasks", "status"])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line == (
        "error: the database closed the connection: "
        "terminating connection due to administrator command"
    )
    assert app.test_cli_runner().invoke(args=["tasks", "status"]).exit_code == 0
