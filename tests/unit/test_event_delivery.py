"""Event delivery with a failing subscriber: nothing newer is held up, nobody else gets an
event twice, refusals back off and park, parked deliveries are shown and re-delivered."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select, update

from extensions import db
from taskrunner import delivery, events, runner
from taskrunner.contract import TaskReportableError
from taskrunner.ledger import ledger
from taskrunner.models import EventDelivery
from tests.support import drain, huey_stop_interrupt, see_logs
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in


class Refuses:
    """A subscriber that refuses every event while ``broken``; counts what it took."""

    def __init__(self) -> None:
        self.broken = True
        self.took: list[str] = []

    def __call__(self, event) -> None:
        if self.broken:
            raise TaskReportableError(
                f"subscriber down, card 4111 1111 1111 1111 ({event['name']})"
            )
        self.took.append(event["id"])


def fresh_run(run_uuid: str):
    db.session.rollback()
    return ledger.runs.get_run(run_uuid)


def test_refused_events_do_not_hold_up_newer_ones_at_the_relay(ctx, controlled, monkeypatch):
    refusing, received = Refuses(), []
    events.subscribe("tasks.unit.failed", refusing)
    events.subscribe("tasks.run.completed", received.append)
    monkeypatch.setattr(delivery, "deliver", lambda outbox: None)
    controlled.failing = {"k1", "k2", "k3", "k4"}
    runner.start("tests.controlled", {"units": 4}, "test")
    drain()  # four tasks.unit.failed, older than the completion below
    controlled.failing = set()
    done = runner.start("tests.controlled", {"units": 1}, "test")
    drain()
    monkeypatch.undo()

    for _ in range(5):  # five passes of a relay that takes three events at a time
        delivery.relay(older_than_seconds=0, limit=3)

    assert [e["payload"]["run_uuid"] for e in received] == [done.uuid]


class Exits:
    """A subscriber that calls ``sys.exit()`` (or raises ``stop``) on every event."""

    def __init__(self) -> None:
        self.stop: BaseException | None = None

    def __call__(self, event) -> None:
        raise self.stop if self.stop is not None else SystemExit(3)


def test_a_subscriber_that_exits_refuses_and_the_relay_pass_still_commits(
    ctx, controlled, monkeypatch
):
    received, exits = Counter(), Exits()
    events.subscribe("tasks.run.completed", lambda event: received.update([event["id"]]))
    events.subscribe("tasks.run.completed", exits)
    monkeypatch.setattr(delivery, "deliver", lambda outbox: None)
    runner.start("tests.controlled", {"units": 1}, "test")
    drain()
    monkeypatch.undo()

    for _ in range(3):  # the event is marked delivered once: the one before never sees it again
        delivery.relay(older_than_seconds=0)

    assert list(received.values()) == [1]
    [refused] = db.session.execute(select(EventDelivery)).scalars()
    assert see_logs(r"builtins\.SystemExit").fullmatch(refused.last_error)


def test_a_consumer_stop_inside_a_subscriber_still_reaches_huey(ctx, controlled, monkeypatch):
    exits = Exits()
    events.subscribe("tasks.run.completed", exits)
    monkeypatch.setattr(delivery, "deliver", lambda outbox: None)
    runner.start("tests.controlled", {"units": 1}, "test")
    drain()
    monkeypatch.undo()
    exits.stop = huey_stop_interrupt()

    with pytest.raises(KeyboardInterrupt):
        delivery.relay(older_than_seconds=0)


def test_a_subscriber_that_took_an_event_never_gets_it_again_when_another_refuses(
    make_app, controlled
):
    app = make_app(TASK_RUNNER_EVENT_RETRY_SECONDS=0)
    with app.app_context():
        refusing, taking = Refuses(), Counter()
        events.subscribe("tasks.run.completed", refusing)
        events.subscribe("tasks.run.completed", lambda event: taking.update([event["id"]]))
        runner.start("tests.controlled", {"units": 1}, "test")
        drain()
        for _ in range(3):
            delivery.relay(older_than_seconds=0)

        assert list(taking.values()) == [1]
        assert refusing.took == []
        refusing.broken = False
        delivery.relay(older_than_seconds=0)
        assert len(refusing.took) == 1 and list(taking.values()) == [1]
        assert delivery.relay(older_than_seconds=0) == 0


def test_a_refused_delivery_waits_for_its_backoff(make_app, controlled):
    app = make_app(TASK_RUNNER_EVENT_RETRY_SECONDS=600)
    with app.app_context():
        refusing = Refuses()
        events.subscribe("tasks.run.completed", refusing)
        runner.start("tests.controlled", {"units": 1}, "test")
        drain()
        refusing.broken = False

        assert delivery.relay(older_than_seconds=0) == 0  # not due for ten minutes
        assert refusing.took == []


def test_a_delivery_refused_too_often_is_parked_shown_and_redelivered_by_an_operator(
    make_app, controlled
):
    app = make_app(TASK_RUNNER_EVENT_RETRY_SECONDS=0, TASK_RUNNER_EVENT_MAX_ATTEMPTS=3)
    cli = app.test_cli_runner()
    with app.app_context():
        refusing = Refuses()
        events.subscribe("tasks.run.completed", refusing)
        handle = runner.start("tests.controlled", {"units": 1}, "test")
        drain()  # refusal 1, by the owner
        assert delivery.relay(older_than_seconds=0) == 1  # refusal 2
        assert delivery.relay(older_than_seconds=0) == 1  # refusal 3: parked
        assert delivery.relay(older_than_seconds=0) == 0  # parked: the relay leaves it
        [event] = [
            e
            for e in ledger.runs.run_events(fresh_run(handle.uuid), limit=200)
            if e["name"].endswith("completed")
        ]

        listed = cli.invoke(args=["events", "parked"])
        assert event["id"] in listed.output and "attempts=3" in listed.output
        assert "4111" not in listed.output  # the refusal is stored redacted
        # A refusal of several lines (a stored reason keeps its newlines) is one line here.
        db.session.execute(
            update(EventDelivery).values(last_error=EventDelivery.last_error + "\nat line 2")
        )
        db.session.commit()
        [line] = cli.invoke(args=["events", "parked"]).stdout.splitlines()
        assert line.endswith("\\nat line 2")
        assert cli.invoke(args=["events", "redeliver"]).exit_code == 2
        # An event's uuid in capitals, as it may be pasted, is the same event.
        still = cli.invoke(args=["events", "redeliver", event["id"].upper()])
        assert still.exit_code == 1
        assert still.stderr.strip() == "error: 1 of 1 deliveries refused again, still parked"

    web = browser(app)
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    sign_in(web, viewer)
    run_page = web.get(f"/backoffice/task-runs/{handle.uuid}")
    assert "Parked deliveries" in run_page.text and event["id"] in run_page.text
    parked_page = web.get("/backoffice/parked-events")
    assert (
        event["id"] in parked_page.text
        and "subscriber down, card [card ····1111]" in parked_page.text
    )

    with app.app_context():
        refusing.broken = False
        done = cli.invoke(args=["events", "redeliver", event["id"]])
        assert done.exit_code == 0, done.output
        assert done.output.strip() == "re-delivered 1 parked delivery"
        assert refusing.took == [event["id"]]
        nothing = cli.invoke(args=["events", "redeliver", "--all"])
        assert nothing.exit_code == 1 and nothing.stderr.strip() == "error: no parked delivery"
    assert "Nothing is parked" in web.get("/backoffice/parked-events").text


def test_a_parked_delivery_refused_again_and_again_stays_parked_with_an_hour_between_tries(
    make_app, controlled
):
    # Each refusal doubles the wait before the next try, capped at an hour: after some
    # forty refusals the doubled wait no longer fit a timedelta, and the command crashed.
    app = make_app(TASK_RUNNER_EVENT_RETRY_SECONDS=60, TASK_RUNNER_EVENT_MAX_ATTEMPTS=1)
    cli = app.test_cli_runner()
    with app.app_context():
        refusing = Refuses()
        events.subscribe("tasks.run.completed", refusing)
        runner.start("tests.controlled", {"units": 1}, "test")
        drain()  # refusal 1, by the owner
        delivery.retry(db.session.execute(select(EventDelivery.id)).scalars())  # 2: parked
        [parked] = delivery.parked()

        for _ in range(3, 61):
            again = cli.invoke(args=["events", "redeliver", parked.event_id])
            assert not isinstance(again.exception, OverflowError)
            assert again.exit_code == 1
            assert again.stderr == "error: 1 of 1 deliveries refused again, still parked\n"

        [still] = delivery.parked()
        assert still.attempts == 60
        assert delivery.backoff(still.attempts) == delivery.MAX_BACKOFF
