"""No secret reaches a log, a database file or a queue file; "see logs" finds its log line.

Item 1 of the security review. A request of a real gunicorn fails with an error
carrying a vendor key and a card number: its log holds neither, and its 500 names
the reference on the log line. A ``diagnostics.probe`` run whose units fail with
driver-style errors carrying ``sk_live_PROBE_SECRET`` and ``4111 1111 1111 1111``
is started by the CLI and run by the real consumers ``flask workers --mode lean``
starts (periodic tasks included); then a run of a tenant's units failing with a
domain error whose message carries an API key, a bearer token, a password in a URL,
``password=``/``token=`` pairs and a card number (``tests.leaky_types``), each failing
the tenant's pending request with the same error, on the same consumers. Then every
log file, database file and queue file is searched for the secrets, the card number in
any spacing; on PostgreSQL every table's rows and on Redis every key of the test's
database stand for the database and queue files. Each failed run's alert, as a real
webhook receiver got it, is searched too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from sqlalchemy import insert, inspect, select, text
from sqlalchemy.exc import IntegrityError

from accounts.models import UserPermission
from asyncrequests.models import AsyncRequest
from extensions import db
from taskrunner import runner
from taskrunner.contract import RunStatus, register
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tests.alert_receivers import HttpReceiver
from tests.leaky_types import EXTRA_MODULES, LEAKY, REQUEST_KIND, LeakyTask
from tests.leaky_types import FOUND as LEAKED
from tests.security.server_hooks import FAILING_PATHS, VendorDown
from tests.security.support import HOOKS, HttpClient
from tests.support import ROOT, process_env, see_logs, wait_for
from tests.web.tenant_api_support import make_tenant

pytestmark = pytest.mark.workers

SECRETS = re.compile(
    rb"sk_live_PROBE_SECRET|4111[\s._-]*1111[\s._-]*1111[\s._-]*1111|" + LEAKED.pattern.encode()
)
REF = re.compile(r"ref ([0-9a-f]{8})")
UNITS, VENDOR_EVERY, CRASH_EVERY = 28, 7, 9


def count_secrets(data: bytes) -> int:
    return len(SECRETS.findall(data)) + len(
        SECRETS.findall(data.decode("utf-16-le", "ignore").encode())
    )


def database_rows() -> bytes:
    """Every row of every table of the test's PostgreSQL database, as text."""
    names = inspect(db.engine).get_table_names()
    rows = [repr(db.session.execute(text(f'SELECT * FROM "{name}"')).all()) for name in names]
    db.session.rollback()
    return "\n".join(rows).encode()


def queue_contents(url: str) -> bytes:
    """Every key and value of the test's Redis database."""
    client = redis.Redis.from_url(url)
    chunks = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        value = {
            "string": lambda k: client.get(k),
            "list": lambda k: client.lrange(k, 0, -1),
            "hash": lambda k: client.hgetall(k),
            "set": lambda k: client.smembers(k),
            "zset": lambda k: client.zrange(k, 0, -1),
        }.get(kind, lambda k: b"")(key)
        chunks.append(key + b" " + repr(value).encode())
    return b"\n".join(chunks)


@pytest.fixture
def alert_hook(app):
    """A real receiver of the alerts, for the consumers started after it (their settings)."""
    server = HttpReceiver()
    app.config["ALERT_WEBHOOK_URL"] = server.url
    yield server
    server.close()


@pytest.fixture
def lean_workers(app, tmp_path):
    log = open(tmp_path / "workers.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "app", "workers", "--mode", "lean"],
        cwd=ROOT,
        env={**process_env(app, **EXTRA_MODULES), "LOG_FILE": ""},  # consumers log to stderr
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield tmp_path / "workers.log"
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log.close()


def test_failing_runs_leave_no_secret_anywhere_and_refs_find_the_log_line(
    app, alert_hook, lean_workers, tmp_path, capsys
):
    context = {
        "units": UNITS,
        "vendor_fail_every": VENDOR_EVERY,
        "fail_every": 10,
        "crash_every": CRASH_EVERY,
    }
    started = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "tasks", "start", "diagnostics.probe"]
        + ["--context", json.dumps(context), "--wait", "120"],
        cwd=ROOT,
        env=process_env(app, LOG_FILE=str(tmp_path / "cli.log")),
        capture_output=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    run_uuid = started.stdout.decode().strip().splitlines()[-1]
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert run.status == RunStatus.COMPLETED_WITH_FAILURES, started.stderr
        vendor = db.session.execute(
            select(TaskRunUnit.unit_key, TaskRunUnit.last_error).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.last_error.like("unhandled%"),
                TaskRunUnit.failure_kind == "vendor",
            )
        ).all()
        # The crashes' stacks are stored (and searched below with every row): the probe's
        # KeyError holds the secret in its locals, which no frame keeps.
        crashes = dict(
            db.session.execute(
                select(TaskRunUnit.unit_key, TaskRunUnit.stack).where(
                    TaskRunUnit.task_run_id == run.id, TaskRunUnit.failure_kind == "crash"
                )
            ).all()
        )
        leaky = leaky_run_on_the_consumers()
        rows = database_rows() if db.engine.dialect.name == "postgresql" else None
    # 7, 14, 21, 28 fail as vendor errors (10 and 20 as domain errors, 9, 18, 27 crash).
    assert sorted(key for key, _ in vendor) == ["probe-14", "probe-21", "probe-28", "probe-7"]
    assert sorted(crashes) == ["probe-18", "probe-27", "probe-9"]
    assert all(stack[-1]["function"] == "_read_settings" for stack in crashes.values())
    assert count_secrets(json.dumps(list(crashes.values())).encode()) == 0
    files = [p for p in [*tmp_path.rglob("*"), *Path(app.instance_path).rglob("*")] if p.is_file()]
    found = {str(path): count_secrets(path.read_bytes()) for path in files}
    if rows is not None:
        found["postgresql tables"] = count_secrets(rows)
    if app.config["QUEUE_DRIVER"] == "redis":
        found["redis queue"] = count_secrets(queue_contents(app.config["REDIS_URL"]))
    # Each failed run's alert, as its receiver got it (the probe's type and the leaky one).
    wait_for(lambda: len(alert_hook.received) == 2, timeout=60, message="the two alerts")
    found["alert bodies received"] = count_secrets(b"\n".join(r.body for r in alert_hook.received))
    hits = {where: n for where, n in found.items() if n}
    with capsys.disabled():
        print(f"\nsecret grep: {sum(hits.values())} hits in {len(found)} files and stores")
    assert hits == {}
    # A unit's traceback is logged before its failure is recorded: the line is there.
    worker_log = lean_workers.read_text()
    for key, reason in vendor:
        assert see_logs(r"sqlalchemy\.exc\.OperationalError").fullmatch(reason)
        ref = REF.search(reason)[1]
        [line] = [line for line in worker_log.splitlines() if f"[ref {ref}]" in line]
        assert f"Unit {key} of run {run_uuid}" in line

    assert "Traceback" in worker_log and "[card ····1111]" in worker_log
    # The domain failures kept their message, scrubbed, in the ledger and for the tenant.
    assert (
        leaky["units"] == leaky["requests"] == {"vendor refused the export: key sk_live_[redacted]"}
    )
    assert "Authorization: Bearer [redacted]" in worker_log


def leaky_run_on_the_consumers() -> dict[str, set[str]]:
    """A run of three units of a tenant, each failing with credentials in its message."""
    register(LeakyTask())
    tenant_id = make_tenant("Acme")
    handle = runner.start(LEAKY, {"tenant_id": tenant_id, "units": 3}, "test")

    def closed():
        db.session.rollback()
        run = ledger.runs.get_run(handle.uuid)
        return run if run.status != RunStatus.RUNNING else None

    run = wait_for(closed, timeout=120, message="the leaky run to close")
    assert (run.status, run.units_failed) == (RunStatus.FAILED, 3)
    reasons = {u["last_error"] for u in ledger.runs.run_units_page(run).items}
    requests = set(
        db.session.execute(
            select(AsyncRequest.reason).where(AsyncRequest.kind == REQUEST_KIND)
        ).scalars()
    )
    db.session.rollback()
    head = len("vendor refused the export: key sk_live_[redacted]")
    return {"units": {r[:head] for r in reasons}, "requests": {r[:head] for r in requests}}


@pytest.mark.parametrize("path", FAILING_PATHS, ids=["page", "problem-body"])
def test_an_error_in_a_request_is_logged_without_its_secrets_under_the_ref_its_500_names(
    gunicorn, app, path
):
    port = gunicorn.start(**HOOKS)

    answer = HttpClient(port).get(path)

    assert answer.status == 500
    [ref] = re.findall(r"it has been logged, ref ([0-9a-f]{8})\.", answer.text)
    assert count_secrets(answer.body) == 0
    # The app's line is written before the answer, gunicorn's access line just after it.
    logs = wait_for(
        lambda: (text := gunicorn.logs(port)).count(f'"GET {path} HTTP/1.1" 500') and text,
        message="the access log line",
    )
    lines = [line for line in logs.splitlines() if f"[ref {ref}]" in line]
    assert lines and all(f"Unhandled error on {path}" in line for line in lines), lines
    assert count_secrets(logs.encode()) == 0
    # The traceback is there, the chained cause's included, scrubbed.
    assert f"{VendorDown.__module__}.{VendorDown.__qualname__}" in logs
    assert "token=[redacted]" in logs and "[card ····1111]" in logs


def test_database_errors_of_the_app_carry_no_bound_values(app):
    secret = "sk_live_PROBE_SECRET"
    with app.app_context():
        # A foreign key violation: neither server names the other values of the row.
        with pytest.raises(IntegrityError) as raised:
            db.session.execute(insert(UserPermission).values(user_id=424242, name=secret))
        db.session.rollback()
    assert secret not in str(raised.value)
    assert "hide_parameters" in str(raised.value)
