"""``flask tasks``: the pinned JSON shape and the refusals."""

from __future__ import annotations

import json

import pytest

from tests.support import COUNT_KEYS, RUN_KEYS, UNIT_KEYS


def start(cli, context: dict) -> str:
    result = cli.invoke(
        args=["tasks", "start", "diagnostics.probe", "--context", json.dumps(context)]
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture
def inline_cli(inline_app):
    return inline_app.test_cli_runner()


def test_status_json_of_one_run_has_the_pinned_shape(inline_cli):
    uuid = start(inline_cli, {"units": 6, "fail_every": 3})

    result = inline_cli.invoke(args=["tasks", "status", uuid, "--json"])

    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert set(data) == RUN_KEYS | {"failed_units", "stale_units", "events"}
    assert set(data["units"]) == COUNT_KEYS
    assert data["units"] | {} == {
        "total": 6,
        "pending": 0,
        "running": 0,
        "completed": 4,
        "failed": 2,
        "skipped": 0,
        "stale": 0,
    }
    assert data["status"] == "completed_with_failures"
    assert [u["unit_key"] for u in data["failed_units"]] == ["probe-3", "probe-6"]
    assert all(set(u) == UNIT_KEYS for u in data["failed_units"])
    assert data["failed_units"][0]["last_error"] == "probe unit 3 failed"
    names = [e["name"] for e in data["events"]]
    assert names == [
        "tasks.run.started",
        "tasks.unit.failed",
        "tasks.unit.failed",
        "tasks.run.failed",
    ]
    assert all(set(e) == {"id", "name", "at", "payload"} for e in data["events"])


def test_status_json_without_a_run_lists_recent_runs(inline_cli):
    first = start(inline_cli, {"units": 1})
    second = start(inline_cli, {"units": 2})

    data = json.loads(inline_cli.invoke(args=["tasks", "status", "--json"]).stdout)

    assert [r["uuid"] for r in data["runs"]] == [second, first]
    assert all(set(r) == RUN_KEYS for r in data["runs"])


def test_start_prints_the_uuid_alone_on_its_last_line(inline_cli):
    result = inline_cli.invoke(
        args=["tasks", "start", "diagnostics.probe", "--context", json.dumps({"units": 1})]
    )
    uuid = result.stdout.strip().splitlines()[-1]
    assert len(uuid) == 36 and uuid.count("-") == 4
    # The count on stderr says its unit in the singular.
    assert "started diagnostics.probe: 1 unit\n" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["tasks", "start", "no.such.type"],
            1,
            "error: task type 'no.such.type' is not registered",
        ),
        (["tasks", "status", "not-a-uuid"], 1, "error: no run not-a-uuid"),
        (
            ["tasks", "status", "00000000-0000-0000-0000-000000000000"],
            1,
            "error: no run 00000000-0000-0000-0000-000000000000",
        ),
        (["tasks", "retry", "garbage"], 1, "error: no run garbage"),
        (["tasks", "cancel", "garbage"], 1, "error: no run garbage"),
    ],
)
def test_refusals_exit_1_with_one_line_on_stderr(cli, args, code, message):
    result = cli.invoke(args=args)

    assert result.exit_code == code
    assert result.stderr.strip() == message


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "start", "diagnostics.probe", "--context", "{not json"],
        ["tasks", "start", "diagnostics.probe", "--context", "[1, 2]"],
        ["tasks", "prune", "--days", "-3"],
        ["tasks", "start"],
    ],
)
def test_usage_errors_exit_2(cli, args):
    assert cli.invoke(args=args).exit_code == 2
