"""A run's units stream into the ledger (issue 27, item 3: a million-unit run).

They are never a list in memory: checked as they come, written in one COPY on
PostgreSQL (its text format, so a key holding a backslash must be escaped), made in a
helper thread beside it (``taskrunner.unit_feed``). A refusal late in the stream, after
whole batches were sent, still leaves nothing behind.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sqlalchemy import func, select

from extensions import db
from taskrunner.contract import TaskOptions, TaskUnit, UnitError, UnitJob, start_run
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.unit_feed import prefetched

TYPE = "tests.streamed"
# COPY's text format reads a backslash as an escape: "\N" unescaped would be a NULL key.
ESCAPED = ["a\\b", "\\N", "\\.", "two\\\\slashes", "end\\"]


class StreamedTask:
    """``{"count": N, "then": [keys]}``: N numbered units, then the given keys."""

    def type(self) -> str:
        return TYPE

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(context.get("count", 0)):
            yield TaskUnit(f"unit-{i}", i)
        for key in context.get("then", []):
            yield TaskUnit(key)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        return lambda: None

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", timeout=60)


@pytest.fixture
def streamed(make_app):
    make_app.register(StreamedTask())


def stored_units() -> list[tuple[str, int | None]]:
    db.session.rollback()
    rows = db.session.execute(
        select(TaskRunUnit.unit_key, TaskRunUnit.tenant_id).order_by(TaskRunUnit.id)
    ).all()
    return [(row.unit_key, row.tenant_id) for row in rows]


def test_keys_holding_backslashes_are_stored_as_they_were_given(ctx, streamed):
    handle = start_run(TYPE, {"count": 2, "then": ESCAPED}, "test")

    assert handle.units_total == 7
    assert stored_units() == [("unit-0", 0), ("unit-1", 1)] + [(key, None) for key in ESCAPED]


def test_a_refusal_after_whole_batches_were_written_leaves_no_row(ctx, streamed):
    ctx.config["TASK_RUNNER_INSERT_CHUNK"] = 1000

    with pytest.raises(UnitError) as refused:
        start_run(TYPE, {"count": 3500, "then": ["unit-7"]}, "test")

    assert "unit 3501: the unit key 'unit-7' is there twice" in str(refused.value)
    db.session.rollback()
    assert db.session.execute(select(func.count()).select_from(TaskRun)).scalar_one() == 0
    assert stored_units() == []


def test_a_long_stream_is_stored_in_its_order(ctx, streamed):
    ctx.config["TASK_RUNNER_INSERT_CHUNK"] = 1000

    handle = start_run(TYPE, {"count": 3500}, "test")

    assert handle.units_total == 3500
    assert stored_units() == [(f"unit-{i}", i) for i in range(3500)]


def test_the_feed_hands_over_every_item_in_order_from_a_thread_of_its_own(ctx):
    makers = set()

    def items() -> Iterator[int]:
        for i in range(25):
            makers.add(threading.current_thread().name)
            yield i

    assert list(prefetched(items(), chunk=4)) == list(range(25))
    assert makers == {"unit-feed"}


def test_the_feed_raises_what_the_items_raised_where_it_was_reached(ctx):
    def items() -> Iterator[int]:
        yield from range(10)
        raise UnitError("unit 11: refused")

    seen = []
    with pytest.raises(UnitError, match="unit 11: refused"):
        for item in prefetched(items(), chunk=3):
            seen.append(item)
    assert seen == list(range(10))


def test_a_caller_that_stops_early_stops_the_feed(ctx):
    made = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            made.append(i)
            yield i
            i += 1

    feed = prefetched(endless(), chunk=10, ahead=2)
    assert next(feed) == 0
    feed.close()  # joins the helper: it must have stopped

    assert not any(t.name == "unit-feed" for t in threading.enumerate())
    assert len(made) <= 10 * 4
