"""Triage on the pages, the JSON API and the CLI (issue 24): a crash told from a vendor
error, with its stack at hand."""

from __future__ import annotations

import csv
import io
import json
from itertools import islice
from urllib.parse import urlencode

import pytest

from diagnostics.probe import FAKE_SECRET
from taskrunner import runner
from taskrunner.contract import TaskReportableError, operations
from taskrunner.types import TaskUnit
from tests.web.backoffice_support import VIEW, browser, finished_run, make_user, sign_in
from tests.web.tenant_api_support import make_tenant


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
    assert "c1  tenant=-  attempts=1  kind=crash  unhandled builtins.KeyError" in result.stdout


def test_the_error_groups_page_counts_every_failed_unit_when_it_shows_the_biggest_groups(
    app, viewer_web
):
    # 56 reasons that fold apart (letters vary, not digits): more groups than the page lists.
    keys = [f"u{i}" for i in range(60)]
    failing = {key: f"no rate for {'x' * (i % 56)}" for i, key in enumerate(keys)}
    with app.app_context():
        run_uuid = finished_run("payments.charges", keys, failing)

    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/errors")
    said = " ".join(page.html.select_one(".head p.muted").get_text().split())
    shown = page.html.select("table.groups tbody tr")

    assert len(shown) == 50
    assert said.startswith("60 failed units; the 50 biggest of their groups are shown")
    assert sum(int(row.select_one("td.num").get_text()) for row in shown) < 60
    assert viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}").json["units"]["failed"] == 60


# -- a group, all of it (item 3) ----------------------------------------------------------

GROUP = "no statement for tenant #"
BY_GROUP = urlencode({"reason": GROUP})


@pytest.fixture
def big_group(app) -> str:
    """A run whose 16 failures of one group fall on 16 tenants (more than a group shows),
    one tenant named like a spreadsheet formula, and a failure of another group."""
    with app.app_context():
        tenants = [make_tenant(f"Tenant {i}") for i in range(15)] + [make_tenant("=HYPERLINK()")]
        keys = [f"s{i}" for i in range(16)] + ["other", "ok"]
        failing = {f"s{i}": f"no statement for tenant {tenants[i]}" for i in range(16)}
        failing["other"] = "vendor refused the export"
        tenant_of = {f"s{i}": tenants[i] for i in range(16)}
        return finished_run("payments.statements", keys, failing, tenants=tenant_of)


def test_more_tenants_opens_every_unit_of_the_group_page_by_page(big_group, viewer_web):
    errors = viewer_web.get(f"/backoffice/task-runs/{big_group}/errors")
    more = errors.html.select_one("a.more-tenants")
    assert more.get_text() == "+4 more"

    seen, page = [], viewer_web.get(more["href"].replace("#units", "") + "&limit=5")
    while True:
        seen += [a.get_text() for a in page.html.select("#units td.key a")]
        nxt = page.html.select_one("#units nav.pager a[rel=next]")
        if nxt is None:
            break
        assert "reason=" in nxt["href"]
        page = viewer_web.get(nxt["href"])
    assert seen == [f"s{i}" for i in range(16)]
    assert GROUP in page.html.select_one(".group-filter").get_text()


def test_a_group_exports_as_csv_with_tenant_names_and_no_formula(big_group, viewer_web):
    answer = viewer_web.get(f"/backoffice/task-runs/{big_group}/units.csv?{BY_GROUP}")

    assert answer.content_type == "text/csv"
    assert "attachment" in answer.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert list(rows[0]) == [
        "tenant_id",
        "tenant_name",
        "unit_key",
        "attempts",
        "kind",
        "reason",
        "finished",
    ]
    assert [r["unit_key"] for r in rows] == [f"s{i}" for i in range(16)]
    assert rows[0]["tenant_name"] == "Tenant 0" and rows[0]["kind"] == "domain"
    assert rows[0]["attempts"] == "1" and rows[0]["finished"].endswith("Z")
    # A cell a spreadsheet would run as a formula is written as text.
    assert rows[15]["tenant_name"] == "'=HYPERLINK()"


def test_a_group_exports_as_json_and_the_api_filters_by_reason(big_group, viewer_web):
    exported = viewer_web.get(f"/backoffice/task-runs/{big_group}/units.json?{BY_GROUP}").json
    assert exported["reason"] == GROUP
    assert len(exported["units"]) == 16
    assert exported["units"][15]["tenant_name"] == "=HYPERLINK()"

    api = viewer_web.get(f"/api/v1/backoffice/task-runs/{big_group}/units?{BY_GROUP}&limit=10").json
    assert [u["unit_key"] for u in api["units"]] == [f"s{i}" for i in range(10)]
    assert api["next_cursor"] == "s9"
    other = viewer_web.get(f"/api/v1/backoffice/task-runs/{big_group}/units?reason=no+such+group")
    assert other.json["units"] == []


@pytest.mark.parametrize("first_window", [1, 2, 1_000])
def test_a_groups_units_page_the_same_whatever_the_window_of_failed_units(
    app, viewer_web, monkeypatch, first_window
):
    """A group's units are read a window of failed units at a time (``group_windows``):
    windows smaller than a page, across other groups' failures and completed units, give
    the same units in the same order, page after page."""
    from taskrunner.ledger import group_windows

    monkeypatch.setattr(group_windows, "FIRST_WINDOW", first_window)
    keys = [f"k{i:02d}" for i in range(30)]
    # Runs of the group's units, another group's between them, a completed unit now and then.
    in_group = [k for i, k in enumerate(keys) if i % 3 != 1 and i % 7 != 6]
    failing = {k: "vendor refused the export" for i, k in enumerate(keys) if i % 3 == 1}
    failing.update({k: f"no statement for tenant {k[1:]}" for k in in_group})
    with app.app_context():
        run_uuid = finished_run("payments.statements", keys, failing)

    seen, cursor = [], None
    while True:
        query = {"reason": GROUP, "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units?{urlencode(query)}")
        seen += [u["unit_key"] for u in page.json["units"]]
        cursor = page.json["next_cursor"]
        if cursor is None:
            break
    assert seen == in_group


def test_the_cli_prints_a_groups_units_and_its_csv(app, big_group, cli):
    listed = cli.invoke(args=["tasks", "status", big_group, "--reason", GROUP])
    exported = cli.invoke(args=["tasks", "status", big_group, "--reason", GROUP, "--csv"])
    refused = cli.invoke(args=["tasks", "status", "--reason", GROUP])

    assert listed.exit_code == 0
    assert len(listed.stdout.splitlines()) == 16 and "kind=domain" in listed.stdout
    assert "16 units in the error group" in listed.stderr
    assert exported.exit_code == 0
    assert len(list(csv.DictReader(io.StringIO(exported.stdout)))) == 16
    assert refused.exit_code == 2 and "need a RUN_UUID" in refused.stderr


def test_the_cli_writes_a_groups_json_as_its_pages_are_read(app, big_group, cli, monkeypatch):
    """``tasks status --reason --json`` built the group's every unit into one list before
    writing a byte: a unit is written as it is read, in the export's shape."""
    monkeypatch.setattr(operations, "EXPORT_PAGE", 3)
    exported = cli.invoke(args=["tasks", "status", big_group, "--reason", GROUP, "--json"])
    assert exported.exit_code == 0
    units = json.loads(exported.stdout)
    assert units["uuid"] == big_group and units["reason"] == GROUP
    assert [u["unit_key"] for u in units["units"]] == [f"s{i}" for i in range(16)]

    export_units = operations.export_units

    def failing_after_a_page(run, reason=None, status=None):
        yield from islice(export_units(run, reason=reason, status=status), 3)
        raise RuntimeError("the ledger went away")

    monkeypatch.setattr(operations, "export_units", failing_after_a_page)
    cut = cli.invoke(args=["tasks", "status", big_group, "--reason", GROUP, "--json"])
    assert isinstance(cut.exception, RuntimeError)
    assert '"unit_key": "s2"' in cut.stdout  # the first page was out before the failure


def test_a_groups_json_export_is_streamed_page_by_page_in_its_documented_shape(
    app, big_group, viewer_web, monkeypatch
):
    """Like the CSV, the JSON export is written as its pages are read: it was built whole
    in memory first (a group of a 100,000-unit run held at once by a web worker)."""
    monkeypatch.setattr(operations, "EXPORT_PAGE", 3)
    client = app.test_client()
    for cookie in viewer_web.cookiejar:
        client.set_cookie(cookie.name, cookie.value)

    answer = client.get(f"/backoffice/task-runs/{big_group}/units.json?{BY_GROUP}", buffered=False)
    pieces = [piece for piece in answer.response if piece]
    answer.close()

    assert answer.status_code == 200 and answer.is_streamed and len(pieces) > 6
    assert answer.mimetype == "application/json"
    assert answer.headers["Content-Disposition"].endswith(".json")
    exported = json.loads(b"".join(p if isinstance(p, bytes) else p.encode() for p in pieces))
    assert set(exported) == {"uuid", "reason", "units"}
    assert exported["uuid"] == big_group and exported["reason"] == GROUP
    assert [u["unit_key"] for u in exported["units"]] == [f"s{i}" for i in range(16)]
    assert exported["units"][15]["tenant_name"] == "=HYPERLINK()"  # JSON is data, no quote
    assert set(exported["units"][0]) == {
        "tenant_id",
        "tenant_name",
        "unit_key",
        "attempts",
        "kind",
        "reason",
        "finished",
    }


class Refusal(TaskReportableError):
    pass


def test_a_refusal_with_a_blank_message_makes_a_group_that_can_be_opened_and_retried(
    inline_app, people, controlled
):
    def refuse(unit):
        # Blank once its control characters are gone, or empty.
        raise Refusal(" \x01\x02 " if unit.key == "k1" else "\t")

    controlled.during = refuse
    with inline_app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
    controlled.during = None
    web = browser(inline_app)
    sign_in(web, people["manager"])

    page = web.get(f"/backoffice/task-runs/{run_uuid}/errors")
    forms = [f for f in page.forms.values() if f.get("reason", default=None) is not None]
    assert [f["reason"].value for f in forms] == ["Refusal"]
    confirm = forms[0].submit("retry-group")
    assert "<strong>2</strong> units" in confirm.text
    group = web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units", {"reason": "Refusal"}).json
    assert sorted(u["unit_key"] for u in group["units"]) == ["k1", "k2"]
