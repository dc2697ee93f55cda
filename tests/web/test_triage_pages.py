"""Triage on the pages, the JSON API and the CLI (issue 24): a crash told from a vendor
error, with its stack at hand."""

from __future__ import annotations

import pytest

from diagnostics.probe import FAKE_SECRET
from taskrunner.contract import operations
from taskrunner.types import TaskUnit
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in


def charge(unit: TaskUnit) -> None:
    """A task's bug: a setting read that was never written (the secret sits in a local)."""
    settings = {"token": FAKE_SECRET}
    settings[f"rate-{unit.key}"]


def crash_run(app, keys: list[str]) -> str:
    with app.app_context():
        return operations.settle_here(
            "payments.charges", {}, "test", [TaskUnit(key) for key in keys], charge
        )


@pytest.fixture
def viewer_web(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    return web


def test_the_error_groups_page_names_a_crash_and_the_line_it_happened_on(app, viewer_web):
    run_uuid = crash_run(app, ["c1", "c2"])

    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/errors")

    [row] = page.html.select("table.groups tbody tr")
    assert row.select_one(".kind-crash").get_text() == "Crash"
    assert "a bug in the task" in row.select_one("td.kind").get_text()
    where = row.select_one(".where").get_text(" ", strip=True)
    assert where.startswith("in tests/web/test_triage_pages.py:")
    assert where.endswith(" in charge")


def test_the_unit_page_shows_the_stack_collapsed_innermost_last(app, viewer_web):
    run_uuid = crash_run(app, ["c1"])

    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/units/c1")

    details = page.html.select_one("details.stack")
    assert details is not None and not details.has_attr("open")
    frames = [li.get_text() for li in details.select("ol.frames li")]
    assert frames[-1].startswith("tests/web/test_triage_pages.py:")
    assert frames[-1].endswith(" in charge")
    assert page.html.select_one(".error-box .kind-crash").get_text() == "Crash"
    assert FAKE_SECRET not in page.text and "rate-c1" not in page.text


def test_the_unit_json_has_its_kind_and_stack(app, viewer_web):
    run_uuid = crash_run(app, ["c1"])

    unit = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/unit?key=c1").json

    assert unit["kind"] == "crash"
    assert unit["stack"][-1] == {
        "file": "tests/web/test_triage_pages.py",
        "line": unit["stack"][-1]["line"],
        "function": "charge",
        "own": True,
    }
    assert FAKE_SECRET not in str(unit)
    units = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units").json["units"]
    assert [u["kind"] for u in units] == ["crash"]


def test_the_unit_json_refuses_a_missing_key_and_a_unit_the_run_lacks(app, viewer_web):
    run_uuid = crash_run(app, ["c1"])

    viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/unit", status=400)
    viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/unit?key=c9", status=404)


def test_the_cli_status_names_each_failed_units_kind(app, cli):
    run_uuid = crash_run(app, ["c1"])

    result = cli.invoke(args=["tasks", "status", run_uuid])

    assert result.exit_code == 0
    assert "c1  tenant=None  attempts=1  kind=crash  unhandled builtins.KeyError" in result.stdout
