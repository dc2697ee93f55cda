"""The command line's rule: a refusal is exit 1 and one line starting ``error:``, a usage
error exit 2, never a traceback, and a refused action writes nothing."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest
from sqlalchemy import func, select, text

from database import is_sqlite
from extensions import db
from security.echo import one_line
from taskrunner.models import TaskRun
from tenancy.models import Tenant
from tests.factories import ControlledTask
from tests.web.tenant_api_support import make_tenant

CONTEXT_DEEP = "[" * 100_000
STRANGE = "bad\nline\x1b[31m\u2028end"


def assert_refused(result, message: str | None = None) -> None:
    """Exit 1, one printable line on stderr starting ``error:`` (and ``message`` in it)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", result.stderr)
    if message is not None:
        assert message in result.stderr


def assert_usage_error(result, message: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def start(cli, type_: str, context: dict) -> str:
    result = cli.invoke(args=["tasks", "start", type_, "--context", json.dumps(context)])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def runs(app) -> int:
    with app.app_context():
        return db.session.execute(select(func.count()).select_from(TaskRun)).scalar_one()


def test_one_line_shows_control_characters_escaped_and_keeps_the_rest():
    assert one_line("no run é\n\x1b[2J\u202e") == "no run é\\n\\x1b[2J\\u202e"


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "status", STRANGE],
        ["tasks", "compare", STRANGE],
        ["tasks", "retry", STRANGE],
        ["tasks", "cancel", STRANGE],
        ["events", "redeliver", STRANGE],
        ["tenants", "token", "revoke", STRANGE],
    ],
)
def test_a_refusal_quoting_a_newline_or_an_escape_sequence_stays_one_line(cli, args):
    result = cli.invoke(args=args)

    assert_refused(result, "bad\\nline\\x1b[31m\\u2028end")


@pytest.mark.parametrize("verb", ["start", "pause", "resume"])
def test_a_task_type_name_pasted_by_mistake_is_refused_in_a_short_line(app, cli, verb):
    # A file pasted where the type goes: the refusal quoted all 100,000 characters.
    result = cli.invoke(args=["tasks", verb, "x" * 100_000])

    assert_refused(result, "error: task type 'xxxx")
    assert "(100000 characters) is not registered" in result.stderr
    assert len(result.stderr) < 200 and runs(app) == 0


def test_a_redelivery_of_many_unknown_events_is_refused_in_a_short_line(cli):
    # 40,000 ids pasted from a file: the refusal counts them rather than quoting them all.
    ids = [f"{i:08x}-0000-4000-8000-000000000000" for i in range(40_000)]

    result = cli.invoke(args=["events", "redeliver", *ids])

    assert_refused(result, "error: no parked delivery of 40,000 events")
    assert len(result.stderr) < 100


@contextmanager
def database_refusing_inserts_into(app, table: str, verb: str = "INSERT"):
    """A real database error that is no outage: a trigger refuses every new row of
    ``table`` (its message stands for one an operator must not read), or every ``verb``."""
    with app.app_context():
        if is_sqlite(db.session):
            statements = [
                f"CREATE TRIGGER refuse_rows BEFORE {verb} ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'secret-laden refusal'); END"
            ]
            undo = ["DROP TRIGGER refuse_rows"]
        else:
            statements = [
                "CREATE FUNCTION refuse_rows() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'secret-laden refusal'; END $$",
                f"CREATE TRIGGER refuse_rows BEFORE {verb} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_rows()",
            ]
            undo = [f"DROP TRIGGER refuse_rows ON {table}", "DROP FUNCTION refuse_rows()"]
        for statement in statements:
            db.session.execute(text(statement))
        db.session.commit()
    try:
        yield
    finally:
        with app.app_context():
            db.session.remove()
            for statement in undo:
                db.session.execute(text(statement))
            db.session.commit()


def assert_not_recorded_with_a_logged_ref(result, what: str, caplog) -> None:
    assert_refused(result, f"error: {what} could not be recorded: unhandled sqlalchemy.exc.")
    assert "dispatch failed" not in result.stderr and "secret-laden" not in result.stderr
    ref = re.search(r"ref ([0-9a-f]{8})", result.stderr).group(1)
    logged = [r for r in caplog.records if ref in r.getMessage()]
    assert logged and "Traceback" in logged[0].exc_text  # the cause, scrubbed


def test_a_run_the_database_refuses_to_record_is_no_dispatch_failure_and_its_ref_is_logged(
    app, cli, caplog
):
    with database_refusing_inserts_into(app, "task_runs"):
        result = cli.invoke(
            args=["tasks", "start", "diagnostics.probe", "--context", '{"units": 2}']
        )

    assert_not_recorded_with_a_logged_ref(result, "a run of diagnostics.probe", caplog)
    assert runs(app) == 0


@pytest.mark.parametrize("action", ["retry", "resume", "cancel", "pause"])
def test_an_operator_action_the_database_refuses_to_record_names_it_and_its_ref_is_logged(
    app, cli, caplog, action
):
    run_uuid = start(cli, "diagnostics.probe", {"units": 2})
    if action == "resume":
        assert cli.invoke(args=["tasks", "pause", "diagnostics.probe"]).exit_code == 0
    args, what = {
        "retry": (["tasks", "retry", run_uuid], f"a retry of run {run_uuid}"),
        "resume": (["tasks", "resume", "diagnostics.probe"], "the resume of diagnostics.probe"),
        "cancel": (["tasks", "cancel", run_uuid], f"the cancel of run {run_uuid}"),
        "pause": (["tasks", "pause", "diagnostics.probe"], "the pause of diagnostics.probe"),
    }[action]

    with database_refusing_inserts_into(app, "operator_actions"):
        result = cli.invoke(args=args)

    assert_not_recorded_with_a_logged_ref(result, what, caplog)


def test_retry_and_cancel_accept_the_uppercase_uuid_that_status_accepts(cli):
    run_uuid = start(cli, "diagnostics.probe", {"units": 3}).upper()

    status = cli.invoke(args=["tasks", "status", run_uuid])
    retried = cli.invoke(args=["tasks", "retry", run_uuid])
    cancelled = cli.invoke(args=["tasks", "cancel", run_uuid])

    assert status.exit_code == 0, status.output
    assert retried.exit_code == 0, retried.output
    assert "re-dispatched 3 units" in retried.stdout
    assert cancelled.exit_code == 0, cancelled.output
    assert "3 units skipped" in cancelled.stdout


def test_a_context_its_type_cannot_make_units_from_is_refused_with_no_run(
    app, cli, caplog, controlled
):
    # A type that checks no context of its own: making its units is where it fails.
    result = cli.invoke(
        args=["tasks", "start", "tests.controlled", "--context", '{"units": "abc"}']
    )

    assert_refused(result, "error: tests.controlled could not make its units")
    assert "dispatch failed" not in result.stderr
    assert runs(app) == 0
    ref = re.search(r"ref ([0-9a-f]{8})", result.stderr).group(1)
    assert any(ref in record.getMessage() for record in caplog.records)


class CheckingBadly(ControlledTask):
    """A ``validate`` with a bug of its own: a key it reads without asking."""

    def validate(self, context) -> None:
        context["period"].upper()


def test_a_context_check_that_breaks_is_a_refused_context_never_a_dispatch_failure(
    make_app, caplog
):
    # No run was made: "dispatch failed" sent the operator to a run that does not exist.
    make_app.register(CheckingBadly("tests.checking_badly"))
    app = make_app()

    result = app.test_cli_runner().invoke(args=["tasks", "start", "tests.checking_badly"])

    assert_refused(result, "error: tests.checking_badly could not check this context: ")
    assert "unhandled builtins.KeyError" in result.stderr
    assert "dispatch failed" not in result.stderr
    assert runs(app) == 0
    ref = re.search(r"ref ([0-9a-f]{8})", result.stderr).group(1)
    assert any(ref in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    "args",
    [
        ["tenants", "create", "\udcff\udcfeab"],
        ["tenants", "token", "revoke", "\udcff"],
        ["events", "redeliver", "\udcff"],
        ["tasks", "status", "00000000-0000-4000-8000-000000000000", "--reason", "\udcffx"],
        ["builder", "start", "--tenant", "1", "--title", "T\udcff"],
    ],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error_wherever_it_is(app, cli, args):
    # What Python makes of bytes that are not UTF-8 on a command line (surrogateescape).
    result = cli.invoke(args=args)

    assert_usage_error(result, "is not UTF-8 text")
    assert "unexpected" not in result.output and runs(app) == 0


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (CONTEXT_DEEP, "not JSON: nested too deeply"),
        ('{"units": NaN}', "not JSON: NaN is not a finite number"),
        ('{"units": Infinity}', "not JSON: Infinity is not a finite number"),
        ('{"units": 1e400}', "not JSON: 1e400 is not a finite number"),
        # Kept the last silently: "units": 3 typed, "units": 100000 run.
        (
            '{"units": 3, "sleep_ms": 5, "units": 100000}',
            "not JSON: the key 'units' is there twice",
        ),
        ('{"units": 1, "batch": "b", "batch": "c"}', "not JSON: the key 'batch' is there twice"),
    ],
)
def test_a_context_that_is_not_json_is_a_usage_error_with_no_run(app, cli, context, message):
    result = cli.invoke(args=["tasks", "start", "diagnostics.effects", "--context", context])

    assert_usage_error(result, message)
    assert runs(app) == 0


@pytest.mark.parametrize("verb", ["upgrade", "downgrade", "show"])
def test_a_migration_command_naming_no_revision_says_why_in_one_line(cli, verb):
    result = cli.invoke(args=["db", verb, "nope"])

    assert result.exit_code == 1
    assert result.stderr == "error: Can't locate revision identified by 'nope'\n"


@pytest.mark.parametrize("wait", ["nan", "inf", "1e400", "-1", "86401"])
def test_a_wait_that_is_not_a_number_of_seconds_up_to_a_day_is_a_usage_error(app, cli, wait):
    # No units: a wait taken would end at once, not hang the test.
    args = ["tasks", "start", "diagnostics.probe", "--context", '{"units": 0}', "--wait", wait]

    assert_usage_error(cli.invoke(args=args), "is not a number of seconds from 0 to 86400")
    assert runs(app) == 0


def test_the_commands_name_a_task_type_as_the_readme_does(cli):
    for command in ("start", "pause", "resume"):
        assert "TYPE_" not in cli.invoke(args=["tasks", command, "--help"]).output


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "prune", "--days", "800000"],
        ["async-requests", "prune", "--days", "99999999999999999999"],
    ],
)
def test_a_retention_beyond_a_century_is_a_usage_error(cli, args):
    assert_usage_error(cli.invoke(args=args), "is not in the range 0<=x<=36500")


@pytest.mark.parametrize(
    "args",
    [
        ["tenants", "token", "create", "9223372036854775808"],
        ["tenants", "token", "list", "99999999999999999999"],
    ],
)
def test_a_tenant_id_beyond_64_bits_names_no_tenant_as_tenants_close_says(cli, args):
    result = cli.invoke(args=args)

    assert_refused(result)
    assert result.stderr == f"error: no tenant {args[-1]}\n"


@pytest.mark.parametrize("spelt", ["0_{}", "+{}", " {}", "{arabic}"])
def test_a_tenant_id_is_ascii_digits_a_slip_names_no_tenant(app, cli, spelt):
    # Python's int() reads 0_7, +7, " 7" and Arabic-Indic digits as 7: each closed tenant 7.
    with app.app_context():
        known = make_tenant("Acme")
    typed = spelt.format(
        known, arabic=str(known).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    )
    for args in (
        ["tenants", "close", typed],
        ["tenants", "token", "create", typed],
        ["tenants", "token", "list", typed],
        ["builder", "start", "--tenant", typed, "--title", "Tides"],
    ):
        assert_usage_error(cli.invoke(args=args), "is not a tenant id (the digits 0-9)")
    with app.app_context():
        assert db.session.get(Tenant, known).status == "active"


def test_the_tokens_of_an_unknown_tenant_are_refused_like_its_other_commands(app, cli):
    with app.app_context():
        known = make_tenant("Acme")

    unknown = cli.invoke(args=["tenants", "token", "list", "99999"])
    listed = cli.invoke(args=["tenants", "token", "list", str(known)])

    assert_refused(unknown)
    assert unknown.stderr == "error: no tenant 99999\n"
    assert listed.exit_code == 0 and listed.stdout.startswith("id ")


@pytest.fixture
def unreadable(tmp_path) -> dict[str, str]:
    binary = tmp_path / "binary.md"
    binary.write_bytes(b"\xff\xfe\x00\x81 not utf-8")
    return {
        "missing": str(tmp_path / "missing.md"),
        "directory": str(tmp_path),
        "binary": str(binary),
    }


@pytest.mark.parametrize("which", ["missing", "directory", "binary"])
@pytest.mark.parametrize("check", [["--check"], []])
def test_openapi_readme_refuses_a_path_it_cannot_read(cli, unreadable, which, check):
    path = unreadable[which]

    result = cli.invoke(args=["openapi", "readme", *check, "--path", path])

    assert_refused(result, f"error: cannot read {path}: ")


def test_openapi_readme_refuses_a_file_without_the_markers_with_error(cli, tmp_path):
    plain = tmp_path / "plain.md"
    plain.write_text("# no markers here\n", encoding="utf-8")

    result = cli.invoke(args=["openapi", "readme", "--path", str(plain)])

    assert_refused(result, f"error: {plain} has no <!-- tenant-api-clients")
    assert plain.read_text(encoding="utf-8") == "# no markers here\n"


@pytest.mark.parametrize("which", ["directory", "binary"])
def test_events_catalog_check_refuses_a_path_it_cannot_read(cli, unreadable, which):
    path = unreadable[which]

    result = cli.invoke(args=["events", "catalog", "--check", "--path", path])

    assert_refused(result, f"error: cannot read {path}: ")


@pytest.mark.parametrize("where", ["no-such-dir/EVENTS.md", "."])
def test_events_catalog_refuses_a_path_it_cannot_write(cli, tmp_path, where):
    path = str(tmp_path / where)

    result = cli.invoke(args=["events", "catalog", "--path", path])

    assert_refused(result, f"error: cannot write {path}: ")


def test_status_refuses_csv_and_json_together(cli):
    run_uuid = start(cli, "diagnostics.probe", {"units": 1})

    result = cli.invoke(args=["tasks", "status", run_uuid, "--csv", "--json"])

    assert_usage_error(result, "give --csv or --json, not both")
    assert result.stdout == ""
