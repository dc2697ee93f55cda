"""Unit keys and tenant ids are checked when a run starts (issue 23, item 5).

PostgreSQL used to refuse an over-long, NUL, surrogate or duplicate key and an
out-of-range tenant id with a raw driver exception, and SQLite stored keys whose unit
page was a 404. One rule (``taskrunner/unit_rules.py``) refuses them before any row is
written -- ``UnitError`` in code, one line and exit 1 in the CLI, a 400 problem body on
the API -- and the unit page reaches every key the rule accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import webtest
from flask import url_for
from sqlalchemy import func, select

from extensions import db
from taskrunner.contract import TaskOptions, TaskUnit, UnitError, UnitJob, start_run
from taskrunner.models import TaskRun, TaskRunUnit
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token

TYPE = "tests.keyed"
BIGINT = 2**63


def points(key: str) -> list[int]:
    """A key spelt as its code points: a context holds no NUL or lone surrogate itself."""
    return [ord(c) for c in key]


# (what is wrong, the units as [key, tenant id] pairs, the part of the refusal naming it)
BAD = [
    ("too long", [["k" * 192, None]], "is longer than 191 characters"),
    ("empty", [["", None]], "''"),
    ("NUL", [[points("a\x00b"), None]], "'a\\x00b' holds a control character"),
    ("newline", [["a\nb", None]], "'a\\nb' holds a control character"),
    ("DEL", [["a\x7fb", None]], "'a\\x7fb' holds a control character"),
    ("C1 control", [["a\x85b", None]], "'a\\x85b' holds a control character"),
    ("lone surrogate", [[points("a\ud800b"), None]], "'a\\ud800b' holds a lone surrogate"),
    ("duplicate", [["same", None], ["other", None], ["same", None]], "unit 3: the unit key"),
    ("tenant too big", [["t", BIGINT]], "unit key 't' is outside the range"),
    ("tenant too small", [["t", -BIGINT - 1]], "unit key 't' is outside the range"),
    ("tenant a text", [["t", "7"]], "unit key 't' is str, not a whole number"),
    ("tenant a boolean", [["t", True]], "unit key 't' is bool, not a whole number"),
]
# Keys the rule accepts, however strange: each must have its page.
GOOD = [
    "a/b",
    "..",
    ".",
    "../../x",
    "ünï/ключ",
    "emoji 🧾 key",
    "k" * 191,
    " spaced ",
    "no\u00a0break",
    "100%",
    "~7E",
]


class KeyedTask:
    """Units named by the context: ``{"units": [[key, tenant id], ...]}``, a key a text or
    its code points."""

    def type(self) -> str:
        return TYPE

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for key, tenant_id in context.get("units", []):
            yield TaskUnit("".join(map(chr, key)) if isinstance(key, list) else key, tenant_id)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        return lambda: None

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", timeout=60)


@pytest.fixture
def keyed(make_app):
    make_app.register(KeyedTask())


def ledger_rows() -> tuple[int, int]:
    db.session.rollback()
    runs = db.session.execute(select(func.count()).select_from(TaskRun)).scalar_one()
    units = db.session.execute(select(func.count()).select_from(TaskRunUnit)).scalar_one()
    return runs, units


@pytest.mark.parametrize(("what", "units", "named"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_unit_is_refused_in_code_before_any_row_is_written(ctx, keyed, what, units, named):
    with pytest.raises(UnitError) as refused:
        start_run(TYPE, {"units": units}, "test")

    assert named in str(refused.value)
    assert "\n" not in str(refused.value)
    assert ledger_rows() == (0, 0)


@pytest.mark.parametrize(("what", "units", "named"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_unit_is_refused_in_the_cli_with_one_line(app, cli, keyed, what, units, named):
    result = cli.invoke(args=["tasks", "start", TYPE, "--context", json.dumps({"units": units})])

    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unit ")
    assert named in lines[0]
    assert "Traceback" not in result.output
    with app.app_context():
        assert ledger_rows() == (0, 0)


@pytest.mark.parametrize(
    "bad_key",
    ["k" * 192, "a\x00b", "a\x1bb", "a\ud800b"],
    ids=["too long", "NUL", "escape", "lone surrogate"],
)
def test_a_bad_unit_is_refused_on_the_api_with_a_400_problem(app, monkeypatch, bad_key):
    # The tenant API is the API that starts runs; its type names its unit from the tenant.
    monkeypatch.setattr("payments.statements.unit_key", lambda *_: bad_key)
    monkeypatch.setattr("payments.statement_requests.unit_key", lambda *_: bad_key)
    with app.app_context():
        _tenant_id, token = tenant_with_token("Acme")

    answer = webtest.TestApp(app).post_json(
        "/api/v1/statements/requests", {"period": PERIOD}, headers=bearer(token), status=400
    )

    assert answer.content_type == "application/problem+json"
    assert answer.json["status"] == 400
    assert "unit 1: the unit key" in answer.json["detail"]
    with app.app_context():
        assert ledger_rows() == (0, 0)


def test_every_key_the_rule_accepts_has_its_unit_page(app, keyed):
    with app.app_context():
        handle = start_run(TYPE, {"units": [[key, None] for key in GOOD]}, "test")
        viewer = make_user("viewer@example.com", VIEW)
    with app.test_request_context():
        targets = {
            key: url_for("backoffice.unit", run_uuid=handle.uuid, unit_key=key) for key in GOOD
        }
    web = browser(app)
    sign_in(web, viewer)

    shown = {}
    for key, target in targets.items():
        page = web.get(target, expect_errors=True)
        shown[key] = page.html.select_one("h1 .mono").get_text() if page.status_int == 200 else None

    assert shown == {key: key for key in GOOD}


def test_the_unit_page_refuses_what_the_rule_refuses(app, keyed):
    with app.app_context():
        handle = start_run(TYPE, {"units": [["a", None]]}, "test")
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    base = f"/backoffice/task-runs/{handle.uuid}/units/"

    for bad in ("k" * 192, "a%00b", "a%C2%85b", "a%0Ab"):
        assert web.get(base + bad, expect_errors=True).status_int == 404


@pytest.mark.parametrize(
    ("bad_key", "exit_code", "said"),
    [
        ("k" * 192, 1, "error: "),
        ("a\x01b", 1, "error: "),
        # Bytes that were not UTF-8 on the command line: refused before any command runs.
        ("a\udcffb", 2, "Error: argument 'a\\udcffb' is not UTF-8 text"),
    ],
    ids=["too long", "control", "lone surrogate"],
)
def test_a_retry_naming_a_key_no_run_can_hold_is_refused_in_one_line(
    app, cli, keyed, bad_key, exit_code, said
):
    with app.app_context():
        handle = start_run(TYPE, {"units": [["k" * 191, None]]}, "test")

    result = cli.invoke(args=["tasks", "retry", handle.uuid, "--unit", bad_key])

    assert result.exit_code == exit_code
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(said)
    assert "Traceback" not in result.output


class Yielding(KeyedTask):
    """Units that are not ``TaskUnit``s: what ``context["unit"]`` names, yielded as it is."""

    def type(self) -> str:
        return "tests.yielding"

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        yield TaskUnit("first")
        yield context["unit"]


@pytest.mark.parametrize(
    ("unit", "named"),
    [({"key": "a", "tenant_id": 1}, "dict"), ("a", "str"), (None, "NoneType")],
)
def test_a_unit_that_is_no_task_unit_is_refused_as_a_unit_not_as_a_database_refusal(
    make_app, unit, named
):
    # It was "a run of … could not be recorded": the words of a write the database refused.
    make_app.register(Yielding())
    app = make_app()
    with app.app_context():
        with pytest.raises(UnitError) as refused:
            start_run("tests.yielding", {"unit": unit}, "test")

        assert str(refused.value) == f"unit 2 is {named}, not a TaskUnit"
        assert ledger_rows() == (0, 0)
