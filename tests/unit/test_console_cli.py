"""``flask tasks retry --reason/--unit``, ``tasks pause/resume`` and ``flask tenants``."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys

import pytest

from extensions import db
from harness import ROOT, process_env
from taskrunner.ledger import ledger
from tenancy.models import Tenant
from tests.web.tenant_api_support import make_tenant


@pytest.fixture
def inline_cli(inline_app):
    return inline_app.test_cli_runner()


def start(cli, context: dict) -> str:
    result = cli.invoke(
        args=["tasks", "start", "diagnostics.probe", "--context", json.dumps(context)]
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def failed_keys(app, run_uuid: str) -> dict[str, int]:
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        return {
            u["unit_key"]: u["attempts"]
            for u in ledger.runs.run_units_page(run, status="failed", limit=100).items
        }


def test_retry_of_one_error_group_retries_only_its_units(inline_app, inline_cli):
    # Units 3 and 6: domain refusals; 5: a vendor error (with fake secrets in it).
    run_uuid = start(inline_cli, {"units": 6, "fail_every": 3, "vendor_fail_every": 5})

    result = inline_cli.invoke(
        args=["tasks", "retry", run_uuid, "--failed-only", "--reason", "probe unit # failed"]
    )

    assert result.exit_code == 0, result.stderr
    assert f"re-dispatched 2 units of run {run_uuid}" in result.stdout
    # The probe fails the same way again: the group's units have a second attempt, the
    # vendor error's unit still one.
    attempts = failed_keys(inline_app, run_uuid)
    assert {k: v for k, v in attempts.items()} == {"probe-3": 2, "probe-5": 1, "probe-6": 2}


def test_retry_of_named_units_takes_only_those(inline_app, inline_cli):
    run_uuid = start(inline_cli, {"units": 6, "fail_every": 3})

    result = inline_cli.invoke(args=["tasks", "retry", run_uuid, "--unit", "probe-6"])

    assert result.exit_code == 0, result.stderr
    assert f"re-dispatched 1 unit of run {run_uuid}" in result.stdout
    assert failed_keys(inline_app, run_uuid) == {"probe-3": 1, "probe-6": 2}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--reason", "no such group"], 1, "nothing to retry"),
        (["--unit", "probe-1"], 1, "nothing to retry"),  # completed: never retried
        (["--unit", "probe-3", "--reason", "x"], 2, "not both"),
        (["--reason", " "], 2, "--reason needs"),
    ],
)
def test_targeted_retry_refusals_are_one_line(inline_cli, args, code, message):
    run_uuid = start(inline_cli, {"units": 3, "fail_every": 3})
    result = inline_cli.invoke(args=["tasks", "retry", run_uuid, *args])
    assert result.exit_code == code
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_pause_and_resume_a_type_from_the_cli(app, cli):
    assert cli.invoke(args=["tasks", "pause", "diagnostics.probe"]).stdout.strip() == (
        "task type diagnostics.probe paused"
    )
    again = cli.invoke(args=["tasks", "pause", "diagnostics.probe"])
    assert again.exit_code == 0 and "already paused" in again.stdout
    run_uuid = start(cli, {"units": 3})
    with app.app_context():
        assert ledger.actions.is_paused("diagnostics.probe")

    resumed = cli.invoke(args=["tasks", "resume", "diagnostics.probe"])

    assert resumed.exit_code == 0, resumed.stderr
    assert "3 waiting units dispatched" in resumed.stdout
    with app.app_context():
        assert not ledger.actions.is_paused("diagnostics.probe")
        assert ledger.runs.get_run(run_uuid).status == "running"
    unknown = cli.invoke(args=["tasks", "pause", "no.such.type"])
    assert (unknown.exit_code, unknown.stderr.count("\n")) == (1, 1)
    assert "not registered" in unknown.stderr
    # Twice, as a pause twice: nothing more to do, and no error.
    not_paused = cli.invoke(args=["tasks", "resume", "diagnostics.probe"])
    assert not_paused.exit_code == 0, not_paused.output
    assert not_paused.stdout == "task type diagnostics.probe was not paused\n"


def test_a_start_or_retry_of_a_paused_type_says_its_units_wait_for_the_resume(app, cli):
    # "started: 3 units" and nothing ran, without a word of why (a --wait then timed out).
    assert cli.invoke(args=["tasks", "pause", "diagnostics.probe"]).exit_code == 0
    waiting = (
        "warning: diagnostics.probe is paused: its units wait until it is resumed "
        "(flask tasks resume diagnostics.probe)"
    )

    started = cli.invoke(args=["tasks", "start", "diagnostics.probe", "--context", '{"units": 3}'])
    retried = cli.invoke(args=["tasks", "retry", started.stdout.strip()])
    empty = cli.invoke(args=["tasks", "start", "diagnostics.probe", "--context", '{"units": 0}'])

    assert started.exit_code == 0 and waiting in started.stderr.splitlines()
    assert retried.exit_code == 0 and waiting in retried.stderr.splitlines()
    assert empty.exit_code == 0 and "warning" not in empty.stderr  # nothing waits
    assert cli.invoke(args=["tasks", "resume", "diagnostics.probe"]).exit_code == 0
    again = cli.invoke(args=["tasks", "start", "diagnostics.probe", "--context", '{"units": 1}'])
    assert "paused" not in again.stderr


def test_counts_of_one_are_said_in_the_singular(app, cli, tmp_path):
    cli.invoke(args=["tasks", "pause", "diagnostics.probe"])
    start(cli, {"units": 1})
    resumed = cli.invoke(args=["tasks", "resume", "diagnostics.probe"])
    assert (
        resumed.stdout.strip() == "task type diagnostics.probe resumed: 1 waiting unit dispatched"
    )
    sheet = tmp_path / "one.csv"
    sheet.write_text("name\nGlobex\n", encoding="utf-8")
    imported = cli.invoke(args=["tenants", "import", str(sheet)])
    assert imported.stdout.strip() == "imported 1 tenant (0 already there)"


def test_tenants_create_list_import_and_close(app, cli, tmp_path):
    created = cli.invoke(args=["tenants", "create", "  Acme   Corporation "])
    assert created.exit_code == 0, created.stderr
    acme = int(created.stdout.strip().splitlines()[-1])

    sheet = tmp_path / "tenants.csv"
    sheet.write_text("id,Name\n1,Globex\n2,acme corporation\n3,Initech\n", encoding="utf-8")
    imported = cli.invoke(args=["tenants", "import", str(sheet)])
    assert imported.exit_code == 0, imported.stderr
    assert "imported 2 tenants (1 already there)" in imported.stdout
    again = cli.invoke(args=["tenants", "import", str(sheet)])
    assert "imported 0 tenants (3 already there)" in again.stdout

    closed = cli.invoke(args=["tenants", "close", str(acme)])
    assert closed.exit_code == 0 and "no longer work" in closed.stdout

    listing = json.loads(cli.invoke(args=["tenants", "list", "--json"]).stdout)
    assert [(t["name"], t["status"]) for t in listing["tenants"]] == [
        ("Acme Corporation", "closed"),
        ("Globex", "active"),
        ("Initech", "active"),
    ]
    assert set(listing["tenants"][0]) == {"id", "name", "status", "created_at"}
    table = cli.invoke(args=["tenants", "list"]).stdout
    assert "Initech" in table and "closed" in table


def test_the_tenant_list_shows_a_stored_names_control_characters_escaped(app, cli):
    # A name stored before names were checked (C1 codes were let through): the listing
    # must not steer the terminal; \x9b is a one-byte escape sequence's start to some.
    with app.app_context():
        make_tenant("\x1b[2JAcme\x9b31m")

    table = cli.invoke(args=["tenants", "list"]).stdout

    assert "\x1b" not in table and "\x9b" not in table
    assert "\\x1b[2JAcme\\x9b31m" in table


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("title\nAcme\n", "needs a header line with a 'name' column"),
        ("name\nAcme\n\n,\n", "line 4: empty name"),
        ("name\n" + "x" * 200 + "\n", "line 2: not a valid tenant name"),
        ("name\nA\x7fcme\n", "line 2: not a valid tenant name"),
        ("name\nAcme\n\x9b2J\n", "line 3: not a valid tenant name"),
        # A quote left open swallowed the lines after it into one tenant.
        ('name\nAlpha Co\n"Beta Co\nGamma Co\nDelta Co\n', "line 3: unexpected end of data"),
        ('name\n"unterminated\n', "line 2: unexpected end of data"),
        ('name\nAlpha Co\n"Beta Co\nGamma Co"\nDelta Co\n', "line 3: a name runs over several"),
        (b"name\n\xff\xfe\n", "not a CSV file"),
    ],
)
def test_a_bad_tenants_file_imports_nothing_and_says_why(app, cli, tmp_path, content, message):
    sheet = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        sheet.write_bytes(content)
    else:
        sheet.write_text(content, encoding="utf-8")
    result = cli.invoke(args=["tenants", "import", str(sheet)])
    assert result.exit_code == 1
    assert message in result.stderr and result.stderr.count("\n") == 1
    with app.app_context():
        assert db.session.query(Tenant).count() == 0


def test_tenant_refusals_are_one_line(cli, tmp_path):
    for args, message in (
        (["tenants", "create", "   "], "needs a name"),
        # C1's CSI steers a terminal as ESC does.
        (["tenants", "create", "a\x9b2Jb"], "cannot hold control characters"),
        (["tenants", "create", "a\x7fb"], "cannot hold control characters"),
        # A right-to-left override shows the name reversed: the one printable rule.
        (["tenants", "create", "acme\u202eexe.pdf"], "cannot hold control characters"),
        (["tenants", "close", "999999"], "no tenant 999999"),
        (["tenants", "import", str(tmp_path / "missing.csv")], "cannot read"),
    ):
        result = cli.invoke(args=args)
        assert result.exit_code == 1, args
        assert message in result.stderr and result.stderr.count("\n") == 1


def test_a_units_line_stays_one_line_and_says_no_tenant_as_a_dash(app, cli):
    # A stored reason keeps its newlines; a unit without a tenant printed "tenant=None".
    from tests.web.backoffice_support import finished_run

    reason = "vendor said no\nat the end"
    with app.app_context():
        before = finished_run("diagnostics.probe", ["u1", "u2"], {"u2": reason})
        run = finished_run("diagnostics.probe", ["u1", "u2"], {"u1": reason, "u2": reason})

    outputs = {
        "status": cli.invoke(args=["tasks", "status", run]).stdout,
        "reason": cli.invoke(args=["tasks", "status", run, "--reason", reason]).stdout,
        "compare": cli.invoke(args=["tasks", "compare", run, before]).stdout,
    }

    for name, output in outputs.items():
        lines = [line for line in output.splitlines() if "u1" in line or "u2" in line]
        assert lines and all("tenant=-" in line for line in lines), (name, output)
        assert all(line.endswith("vendor said no\\nat the end") for line in lines), (name, output)
        assert "at the end" not in output.replace("\\nat the end", ""), (name, output)


def test_start_with_wait_fails_when_no_worker_ends_the_run_in_time(cli):
    # The README's check end to end: with no consumer running it must not pass.
    context = json.dumps({"units": 2, "sleep_ms": 0})
    result = cli.invoke(
        args=["tasks", "start", "diagnostics.probe", "--context", context, "--wait", "0.3"]
    )

    assert result.exit_code == 1
    run_uuid = result.stdout.strip()
    assert result.stderr.splitlines()[-1] == f"error: run {run_uuid} still running after 0.3 s"


def test_start_with_wait_says_how_the_run_ended(inline_cli):
    context = json.dumps({"units": 4, "fail_every": 2, "sleep_ms": 0})
    result = inline_cli.invoke(
        args=["tasks", "start", "diagnostics.probe", "--context", context, "--wait", "30"]
    )

    assert result.exit_code == 0, result.stderr
    assert "finished: completed_with_failures" in result.stderr


def test_start_with_wait_says_the_run_uuid_before_it_waits(app):
    # It came only at the end of the wait: an operator who stopped waiting (Ctrl-C) had a
    # run going and no uuid to follow, retry or cancel it by.
    command = ["tasks", "start", "diagnostics.probe", "--context", '{"units": 1}', "--wait", "60"]
    waiting = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "app", *command],
        cwd=ROOT,
        env=process_env(app),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # As typed at a terminal: a suite run in the background (CI runs both backends
        # at once) has SIGINT ignored, and a child would inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        said, _, _ = select.select([waiting.stdout], [], [], 30)
        assert said, "no uuid while it waits"
        run_uuid = waiting.stdout.readline().strip()
        assert waiting.poll() is None  # still waiting
        waiting.send_signal(signal.SIGINT)
        waiting.wait(timeout=30)
    finally:
        waiting.kill()
        waiting.wait()

    with app.app_context():
        assert ledger.runs.get_run(run_uuid).status == "running"
