"""The JSON read API: the pinned shapes of SPEC §9, cursor pagination, uuids only."""

from __future__ import annotations

import pytest

from taskrunner import runner
from taskrunner.ledger import ledger
from tests.support import COUNT_KEYS, RUN_KEYS, UNIT_KEYS
from tests.web.backoffice_support import browser, finished_run, make_user, sign_in


@pytest.fixture
def api(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", "task-runner.runs.view")
    web = browser(app)
    sign_in(web, viewer)
    return web


def test_the_run_list_pages_newest_first_with_next_cursor(app, api):
    with app.app_context():
        made = [finished_run("diagnostics.probe", [f"probe-{i}"], {}) for i in range(7)]

    seen, cursor = [], None
    for _ in range(4):
        query = "limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = api.get(f"/api/v1/backoffice/task-runs?{query}").json
        assert set(body) == {"runs", "next_cursor"}
        seen += [run["uuid"] for run in body["runs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert seen == list(reversed(made))
    assert all(set(run) == RUN_KEYS for run in body["runs"])


def test_the_run_list_filters_by_type_and_status(app, api, controlled):
    with app.app_context():
        finished_run("diagnostics.probe", ["probe-1"], {"probe-1": "probe unit 1 failed"})
        running = runner.start(controlled.type(), {"units": 2}, "test").uuid

    by_type = api.get(f"/api/v1/backoffice/task-runs?type={controlled.type()}").json["runs"]
    by_status = api.get("/api/v1/backoffice/task-runs?status=failed").json["runs"]

    assert [r["uuid"] for r in by_type] == [running]
    assert by_type[0]["units"] == {
        "total": 2,
        "pending": 2,
        "running": 0,
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "stale": 0,
    }
    assert [r["type"] for r in by_status] == ["diagnostics.probe"]


def test_the_run_list_reads_its_counts_in_a_fixed_number_of_queries(app, api, controlled):
    from sqlalchemy import event

    from extensions import db

    def statements_of_the_list() -> list[str]:
        seen: list[str] = []

        def record(_conn, _cursor, statement, *_args) -> None:
            seen.append(statement)

        with app.app_context():
            engine = db.engine
        event.listen(engine, "before_cursor_execute", record)
        try:
            body = api.get("/api/v1/backoffice/task-runs?limit=50").json
        finally:
            event.remove(engine, "before_cursor_execute", record)
        with app.app_context():
            for run in body["runs"]:
                assert run["units"] == ledger.counts.run_counts(ledger.runs.get_run(run["uuid"]))
        return [s for s in seen if "task_run_units" in s]

    with app.app_context():
        finished_run("diagnostics.probe", ["probe-1"], {})
        runner.start(controlled.type(), {"units": 2}, "test")
    few = statements_of_the_list()
    with app.app_context():
        for _ in range(6):
            finished_run("diagnostics.probe", ["probe-1"], {"probe-1": "probe unit 1 failed"})
            runner.start(controlled.type(), {"units": 2}, "test")
    many = statements_of_the_list()

    assert len(many) == len(few) <= 2, many


def test_a_run_detail_has_the_pinned_shape_and_no_internal_ids(app, api):
    with app.app_context():
        run_uuid = finished_run(
            "diagnostics.probe",
            ["probe-1", "probe-2"],
            {"probe-2": "probe unit 2 failed"},
            tenants={"probe-2": 4},
        )

    body = api.get(f"/api/v1/backoffice/task-runs/{run_uuid}").json

    assert set(body) == RUN_KEYS | {"failed_units", "stale_units", "events"}
    assert set(body["units"]) == COUNT_KEYS
    assert body["status"] == "completed_with_failures"
    [failed] = body["failed_units"]
    assert set(failed) == UNIT_KEYS
    assert (failed["unit_key"], failed["tenant_id"], failed["last_error"]) == (
        "probe-2",
        4,
        "probe unit 2 failed",
    )
    assert {e["name"] for e in body["events"]} >= {
        "tasks.run.started",
        "tasks.unit.failed",
        "tasks.run.failed",
    }
    assert all(set(e) == {"id", "name", "at", "payload"} for e in body["events"])
    assert '"id": 1' not in str(body) and "task_run_id" not in str(body)


def test_the_units_of_a_run_page_by_unit_key(app, api):
    keys = [f"doc-{i:02d}" for i in range(12)]
    with app.app_context():
        run_uuid = finished_run("diagnostics.probe", keys, {"doc-03": "broken"})

    seen, cursor = [], ""
    while True:
        body = api.get(
            f"/api/v1/backoffice/task-runs/{run_uuid}/units?limit=5"
            f"{'&cursor=' + cursor if cursor else ''}"
        ).json
        seen += [u["unit_key"] for u in body["units"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    failed = api.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units?status=failed").json

    assert seen == keys
    assert [u["unit_key"] for u in failed["units"]] == ["doc-03"]


def test_error_groups_fold_numbers_and_name_the_tenants(app, api):
    with app.app_context():
        run_uuid = finished_run(
            "diagnostics.probe",
            [f"probe-{i}" for i in range(1, 8)],
            {
                "probe-2": "probe unit 2 failed",
                "probe-4": "probe unit 4 failed",
                "probe-6": "probe unit 6 failed",
                "probe-5": "unhandled x.Vendor — see logs",
            },
            tenants={"probe-2": 12, "probe-4": 14, "probe-6": 12, "probe-5": 3},
        )

    body = api.get(f"/api/v1/backoffice/task-runs/{run_uuid}/errors").json

    assert body["groups"] == [
        {
            "reason": "probe unit # failed",
            "kind": "domain",
            "where": None,
            "example": "probe unit 2 failed",
            "count": 3,
            "retrying": 0,
            "tenants": 2,
            "tenant_sample": [12, 14],
        },
        {
            "reason": "unhandled x.Vendor — see logs",
            "kind": "vendor",
            "where": None,
            "example": "unhandled x.Vendor — see logs",
            "count": 1,
            "retrying": 0,
            "tenants": 1,
            "tenant_sample": [3],
        },
    ]


def test_the_error_groups_page_past_fifty_groups_with_next_cursor(app, api):
    # 60 groups of 1 to 5 units, many of one size: each comes once, biggest first.
    reasons = {
        f"g{g}-{n}": f"vendor {chr(65 + g // 26)}{chr(65 + g % 26)} refused"
        for g in range(60)
        for n in range(1 + g % 5)
    }
    with app.app_context():
        run_uuid = finished_run("tests.groups", list(reasons), reasons)
    path = f"/api/v1/backoffice/task-runs/{run_uuid}/errors"

    first = api.get(path).json
    assert len(first["groups"]) == 50 and first["next_cursor"] == first["groups"][-1]["reason"]
    rest = api.get(path, {"cursor": first["next_cursor"]}).json
    assert len(rest["groups"]) == 10 and rest["next_cursor"] is None
    groups = first["groups"] + rest["groups"]
    assert len({g["reason"] for g in groups}) == 60
    assert sum(g["count"] for g in groups) == len(reasons)
    assert [g["count"] for g in groups] == sorted((g["count"] for g in groups), reverse=True)

    small = api.get(path, {"limit": 7}).json
    assert small["groups"] == first["groups"][:7]
    assert (
        api.get(path, {"limit": 7, "cursor": small["next_cursor"]}).json["groups"]
        == (first["groups"][7:14])
    )
    assert api.get(path, {"cursor": "no such group"}, status=400).json["detail"] == (
        "bad cursor: the cursor names no error group of this run"
    )
    assert api.get(path, {"limit": "0"}, status=400)
    assert api.get(path, {"cursor": "x" * 601}, status=400).json["detail"] == (
        "cursor is longer than 600 characters"
    )


def test_a_tenants_history_spans_runs_newest_first(app, api):
    with app.app_context():
        older = finished_run(
            "payments.monthly_statements",
            ["tenant-5:2026-09"],
            {"tenant-5:2026-09": "no billing address"},
            {"tenant-5:2026-09": 5},
        )
        newer = finished_run(
            "payments.monthly_statements",
            ["tenant-5:2026-10"],
            {"tenant-5:2026-10": "no billing address"},
            {"tenant-5:2026-10": 5},
        )
        finished_run(
            "payments.monthly_statements", ["tenant-6:2026-10"], {}, {"tenant-6:2026-10": 6}
        )

    body = api.get("/api/v1/backoffice/units?tenant=5").json
    page = api.get("/backoffice/units?tenant=5")

    assert [u["run_uuid"] for u in body["units"]] == [newer, older]
    assert "Failed in its last 2 runs." in page.text
    api.get("/api/v1/backoffice/units", status=400)


def test_a_unit_page_lists_only_that_units_events(app, api):
    with app.app_context():
        run_uuid = finished_run(
            "diagnostics.probe",
            ["probe-1", "probe-2", "probe-12"],
            {"probe-2": "probe unit 2 failed", "probe-12": "probe unit 12 failed"},
        )
        run = ledger.runs.get_run(run_uuid)
        events = ledger.runs.unit_events(run, "probe-2")
        ledger.session.remove()

    assert [(e["name"], e["payload"]["unit_key"]) for e in events] == [
        ("tasks.unit.failed", "probe-2")
    ]
    page = api.get(f"/backoffice/task-runs/{run_uuid}/units/probe-2")
    assert "probe unit 2 failed" in page.text
    assert "probe unit 12 failed" not in page.text
