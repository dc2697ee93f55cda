"""A failure's kind and its redacted stack (issue 24, items 1 and 2; SPEC §17, "Triage").

A bug in the task is a crash, a driver or network error a vendor error, the task's own
refusal a domain refusal, a unit that never ran in time expired; each is stored with the
unit. The stack keeps file, line and function of each frame, innermost last, never a
local, never the message of a non-domain error.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from diagnostics.probe import FAKE_CARD, FAKE_SECRET
from extensions import db
from taskrunner import failures, runner
from taskrunner.contract import ContextError, register_vendor_error
from taskrunner.failures import MAX_FRAMES, Failure, kind_of
from taskrunner.ledger import ledger
from taskrunner.models import OutboxEvent, TaskRunUnit
from taskrunner.settle import settle_here
from taskrunner.types import TaskUnit

PROBE = {"units": 12, "fail_every": 4, "vendor_fail_every": 5, "crash_every": 3}


def stored(run_uuid: str) -> dict[str, TaskRunUnit]:
    run = ledger.runs.get_run(run_uuid)
    units = db.session.execute(
        select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id)
    ).scalars()
    return {unit.unit_key: unit for unit in units}


def test_a_bug_is_a_crash_a_driver_error_vendor_and_a_refusal_domain(inline_ctx):
    handle = runner.start("diagnostics.probe", PROBE, "test")

    units = stored(handle.uuid)
    # 4, 8, 12 refuse (domain first); 5, 10 are vendor errors; 3, 6, 9 crash.
    kinds = {key: u.failure_kind for key, u in units.items() if u.status == "failed"}
    assert kinds == {
        "probe-4": "domain",
        "probe-8": "domain",
        "probe-12": "domain",
        "probe-5": "vendor",
        "probe-10": "vendor",
        "probe-3": "crash",
        "probe-6": "crash",
        "probe-9": "crash",
    }
    assert all(u.failure_kind is None for u in units.values() if u.status == "completed")


def test_the_failure_event_and_the_unit_json_carry_the_kind(inline_ctx):
    handle = runner.start("diagnostics.probe", PROBE, "test")

    payloads = {
        e.payload["unit_key"]: e.payload
        for e in db.session.execute(
            select(OutboxEvent).where(OutboxEvent.name == "tasks.unit.failed")
        ).scalars()
    }
    assert payloads["probe-3"]["kind"] == "crash"
    assert payloads["probe-5"]["kind"] == "vendor"
    run = ledger.runs.get_run(handle.uuid)
    assert ledger.runs.find_unit(run, "probe-3")["kind"] == "crash"
    assert ledger.runs.find_unit(run, "probe-4")["kind"] == "domain"
    assert ledger.runs.find_unit(run, "probe-1")["kind"] is None


def test_an_error_group_of_crashes_is_a_crash_and_names_our_innermost_frame(inline_ctx):
    handle = runner.start("diagnostics.probe", PROBE, "test")

    groups = {g.kind: g for g in ledger.errors.error_groups(ledger.runs.get_run(handle.uuid))}
    assert groups["crash"].count == 3
    assert groups["crash"].where.startswith("diagnostics/probe.py:")
    assert groups["crash"].where.endswith(" in _read_settings")
    assert groups["domain"].where.endswith(" in probe")


def test_the_stack_is_file_line_function_innermost_last_without_messages_or_locals(
    inline_ctx,
):
    handle = runner.start("diagnostics.probe", PROBE, "test")

    run = ledger.runs.get_run(handle.uuid)
    for key in ("probe-3", "probe-5"):
        stack = ledger.runs.find_unit(run, key)["stack"]
        assert stack and all(set(f) == {"file", "line", "function", "own"} for f in stack)
        text = json.dumps(stack)
        for secret in (FAKE_SECRET, FAKE_CARD, "missing-setting", "vendor_accounts"):
            assert secret not in text
        assert not any(f["file"].startswith("/") for f in stack)
    crash = ledger.runs.find_unit(run, "probe-3")["stack"]
    assert crash[-1]["file"] == "diagnostics/probe.py"
    assert crash[-1]["function"] == "_read_settings"
    assert crash[-1]["own"] is True


def test_a_library_frame_is_named_relative_to_its_library():
    try:
        json.loads("{")
    except ValueError as exc:
        stack = failures.stack_of(exc)
    assert stack[-1]["file"] == "json/decoder.py"
    assert stack[-1]["own"] is False
    assert stack[0]["file"] == "tests/unit/test_failure_kinds.py"
    assert stack[0]["own"] is True


def test_the_stack_keeps_the_innermost_thirty_frames():
    def deep(n: int) -> None:
        if n == 0:
            raise ZeroDivisionError
        deep(n - 1)

    try:
        deep(100)
    except ZeroDivisionError as exc:
        failure = Failure.of(exc)
    assert failure.kind == "crash"
    assert len(failure.stack) == MAX_FRAMES
    assert failure.stack[-1]["function"] == "deep"


@pytest.mark.parametrize(
    "exc",
    [KeyError("k"), TypeError(), AttributeError(), IndexError(), NameError(), AssertionError()],
)
def test_bug_type_exceptions_are_crashes(exc):
    assert kind_of(exc) == "crash"


@pytest.mark.parametrize("exc", [ConnectionError(), TimeoutError(), OSError()])
def test_network_and_timeout_errors_are_vendor_errors(exc):
    assert kind_of(exc) == "vendor"


def test_the_known_http_and_queue_clients_errors_are_vendor_errors():
    # Looked up once their client is imported, never imported for the lookup.
    import httpx
    import redis
    import urllib3

    request = httpx.Request("GET", "https://vendor.example/")
    for exc in (
        httpx.ConnectError("refused"),
        httpx.HTTPStatusError("503", request=request, response=httpx.Response(503)),
        urllib3.exceptions.ProtocolError("reset"),
        redis.exceptions.ConnectionError("down"),
        redis.exceptions.TimeoutError("slow"),
    ):
        assert kind_of(exc) == "vendor", exc


def test_a_package_declares_its_clients_errors_as_vendor_errors():
    class ProviderUnavailable(Exception):
        pass

    assert kind_of(ProviderUnavailable()) == "crash"
    register_vendor_error(ProviderUnavailable)
    assert kind_of(ProviderUnavailable()) == "vendor"


def test_a_completed_retry_clears_the_kind_and_the_stack(inline_ctx, controlled):
    controlled.failing = {"k2"}
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    assert stored(handle.uuid)["k2"].failure_kind == "domain"

    controlled.failing = set()
    runner.retry(handle.uuid, failed_only=True)

    db.session.expire_all()
    unit = stored(handle.uuid)["k2"]
    assert (unit.status, unit.failure_kind, unit.stack) == ("completed", None, None)


def test_an_expired_unit_is_stored_as_expired(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 1}, "test")
    unit = stored(handle.uuid)["k1"]

    ledger.sweeps.expire(unit.id, unit.dispatch_token)

    db.session.expire_all()
    assert stored(handle.uuid)["k1"].failure_kind == "expired"


def test_a_run_settled_here_keeps_kinds_and_stacks(ctx):
    def work(unit: TaskUnit) -> None:
        {}[unit.key]

    run_uuid = settle_here("tests.here", {}, "test", [TaskUnit("a")], work)

    unit = stored(run_uuid)["a"]
    assert unit.failure_kind == "crash"
    assert unit.stack[-1]["function"] == "work"


@pytest.mark.parametrize(
    "context", [{"units": 3, "crash_evry": 2}, {"units": 3, "crash_every": "2"}]
)
def test_the_probe_refuses_unknown_keys_and_values_that_are_not_whole_numbers(ctx, context):
    with pytest.raises(ContextError):
        runner.start("diagnostics.probe", context, "test")
