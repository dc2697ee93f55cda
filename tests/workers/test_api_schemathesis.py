"""Schemathesis against a real server: every operation of both OpenAPI documents.

A gunicorn process serves the app on the test backend's database and queue, a
real consumer runs the statement jobs, a real tenant token and a session signed
in through the login form authenticate. Schemathesis runs every phase (the
documents' examples, coverage, fuzzing, and the stateful phase that follows the
documents' links: request a statement, then poll it, then download it) with
every check; any server error, schema violation or undocumented status fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from blueprints.api.contract import EXAMPLE_RUN
from blueprints.openapi_cli import BEGIN, END
from blueprints.problems import MAX_REQUEST_TARGET, MEDIA_TYPE, SERVER_REQUEST_LINE_LIMIT
from extensions import db
from payments.statements import generate_statement
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun
from tests.live_server import LiveServer
from tests.support import Consumers
from tests.web.backoffice_support import PASSWORD, finished_run, make_user
from tests.web.tenant_api_support import tenant_with_token

pytestmark = pytest.mark.workers

CONFIG = Path(__file__).with_name("schemathesis.toml")
README = Path(__file__).resolve().parents[2] / "README.md"
FENCED = re.compile(r"```(\w+)\n(.*?)```", re.S)
ACCESS_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) ')
DOCUMENTS = {
    "tenant": "/api/v1/openapi.json",
    "backoffice": "/api/v1/backoffice/openapi.json",
}


@dataclass(frozen=True)
class Live:
    server: LiveServer
    token: str
    cookie: str
    cookie_name: str

    def document(self, name: str) -> httpx.Response:
        """A document fetched as its client would: the backoffice's with the session."""
        answer = httpx.get(
            self.server.url + DOCUMENTS[name], cookies={self.cookie_name: self.cookie}
        )
        answer.raise_for_status()
        return answer


def seed_ledger(tenant_id: int) -> None:
    """Runs of both documented types, with failures, and a running run whose units are stale."""
    generate_statement(tenant_id, "2026-09")
    finished_run(
        "payments.monthly_statements",
        [f"statements:{tenant_id}:2026-08", "statements:999:2026-08"],
        {"statements:999:2026-08": "tenant 999 has no billing address for 2026-08"},
        tenants={f"statements:{tenant_id}:2026-08": tenant_id, "statements:999:2026-08": 999},
    )
    probe = finished_run(
        "diagnostics.probe",
        ["probe-1", "probe-2", "probe-3"],
        {"probe-2": "probe unit 2 failed", "probe-3": "unhandled builtins.OSError — see logs"},
    )
    # The run the documents' examples name: every example (a run, its unit "probe-3")
    # answers a success, whatever path the random phases take.
    db.session.execute(update(TaskRun).where(TaskRun.uuid == probe).values(uuid=EXAMPLE_RUN))
    db.session.commit()
    # Queued and never enqueued: "never started" once TASK_RUNNER_NEVER_STARTED_SECONDS pass.
    ledger.transitions.create_run(
        "diagnostics.probe", {}, "test", [TaskUnit(f"probe-{i}") for i in (1, 2)], 1000
    )
    db.session.remove()


@pytest.fixture
def live(make_app, tmp_path):
    app = make_app(TASK_RUNNER_NEVER_STARTED_SECONDS=1)
    with app.app_context():
        tenant_id, token = tenant_with_token("Acme")
        make_user("viewer@example.com", "task-runner.runs.view")
        seed_ledger(tenant_id)
    consumers = Consumers(app, tmp_path)
    consumers.start("tasks", workers=1)
    server = LiveServer(app, tmp_path)
    try:
        cookie = server.sign_in("viewer@example.com", PASSWORD)
        yield Live(server, token, cookie, app.config["SESSION_COOKIE_NAME"])
    finally:
        server.stop()
        consumers.stop_all()
    log = (tmp_path / "app.log").read_text() if (tmp_path / "app.log").exists() else ""
    assert "Unhandled error" not in log, log[-3000:]


def run_schemathesis(live: Live, document: str, folder: Path) -> dict:
    """Fetch the document as its client would, run ``st`` on it; return the JSON report."""
    url = live.server.url
    schema = folder / f"{document}.json"
    schema.write_text(live.document(document).text)
    report = folder / f"{document}-report.json"
    env = {
        **os.environ,
        "TASKLEDGER_TENANT_TOKEN": live.token,
        "TASKLEDGER_SESSION_COOKIE": live.cookie,
        "NO_COLOR": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(CONFIG),
            "run",
            str(schema),
            "--url",
            url,
            "--checks",
            "all",
            "--report",
            "json",
            "--report-json-path",
            str(report),
            # A failure prints its seed: SCHEMATHESIS_SEED=<seed> replays those cases.
            *(
                ["--seed", os.environ["SCHEMATHESIS_SEED"]]
                if "SCHEMATHESIS_SEED" in os.environ
                else []
            ),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert report.exists(), result.stdout[-5000:] + result.stderr[-3000:]
    summary = json.loads(report.read_text())
    summary["output"] = result.stdout
    return summary


@pytest.mark.parametrize("document", sorted(DOCUMENTS))
def test_schemathesis_finds_no_server_error_schema_violation_or_undocumented_status(
    live, document, tmp_path, capsys
):
    summary = run_schemathesis(live, document, tmp_path)

    operations, cases = summary["operations"], summary["test_cases"]
    # The closing figures: shown in the suite's output for the record, asserted below.
    with capsys.disabled():
        print(
            f"\nschemathesis {document}: {operations['tested']} operations, "
            f"{cases['generated']} generated cases, {len(summary['failures'])} failures, "
            f"seed {summary['seed']}"
        )
    assert summary["exit_code"] == 0, summary["output"][-8000:]
    assert summary["failures"] == [] and summary["errors"] == [], summary["output"][-8000:]
    assert operations["tested"] == operations["total"] > 0
    assert operations["errored"] == operations["skipped"] == 0
    assert all(phase["status"] == "success" for phase in summary["phases"].values()), summary[
        "phases"
    ]
    assert cases["with_failures"] == cases["errored"] == 0
    # Not only refusals: every operation answered a success to some generated case. A 200
    # from the poll needs a request's uuid, which only the create's answer holds: the
    # stateful chain (request → poll → download) ran.
    schema = json.loads((tmp_path / f"{document}.json").read_text())
    answered = successes(live.server.log_path.read_text(), schema)
    assert answered == operations_of(schema), answered


def operations_of(schema: dict) -> set[str]:
    return {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item}


def successes(access_log: str, schema: dict) -> set[str]:
    """Operations (``METHOD /path/{param}``) that answered a 2xx, read from the access log."""
    templates = [
        (re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path)) + "$"), path)
        for path in schema["paths"]
    ]
    found = set()
    for method, target, status in ACCESS_LINE.findall(access_log):
        path = target.split("?", 1)[0]
        if status.startswith("2"):
            found |= {f"{method} {t}" for pattern, t in templates if pattern.match(path)}
    return found & operations_of(schema)


def readme_client_blocks(language: str) -> list[str]:
    section = README.read_text().partition(BEGIN)[2].partition(END)[0]
    return [code for lang, code in FENCED.findall(section) if lang == language]


def test_the_readme_client_examples_run_against_the_server(live, monkeypatch):
    """Each curl command and httpx call of the README reaches its operation, authenticated.

    Their ids are the document's examples, so a download may be a 404 here; a 401 or a
    400 would mean the snippet itself is wrong.
    """
    env = {"TASKLEDGER_URL": live.server.url, "TOKEN": live.token}
    commands = readme_client_blocks("sh")
    setup, *calls = readme_client_blocks("python")
    assert len(commands) == len(calls) == 3

    for command in commands:
        status = subprocess.run(
            ["bash", "-c", command.rstrip() + " -o /dev/null -w '%{http_code}'"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert status in {"200", "202", "404"}, (command, status)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    namespace: dict = {}
    exec(setup, namespace)
    for call in calls:
        exec(call, namespace)
        assert namespace["answer"].status_code in {200, 202, 404}, call
    namespace["client"].close()


def test_a_url_over_the_apis_limit_is_a_414_problem_body_from_the_real_server(live):
    """gunicorn's own line limit sits above the app's: the app answers, in its problem body."""
    for name in DOCUMENTS:
        for methods in live.document(name).json()["paths"].values():
            for operation in methods.values():
                assert operation["responses"]["414"] == {
                    "$ref": "#/components/responses/ProblemUriTooLong"
                }, (name, operation["operationId"])
    path = "/api/v1/backoffice/task-runs?cursor="
    # Just over the app's limit, and as long as gunicorn's request line allows.
    longest = SERVER_REQUEST_LINE_LIMIT - len("GET  HTTP/1.1")
    for length in (MAX_REQUEST_TARGET + 1, longest):
        answer = httpx.get(live.server.url + path + "x" * (length - len(path)))
        assert answer.status_code == 414, length
        assert answer.headers["content-type"] == MEDIA_TYPE, answer.text[:300]
        assert answer.json()["error"] == "uri_too_long"
