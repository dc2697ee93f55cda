"""The alert rules and their episodes: sent once, reminded after the interval, resolved once,
and a condition that flaps inside its window is one episode. Judged on the clock seam
(``evaluate(now)``); the alerts reach a real HTTP receiver through the outbox."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import func, select, update

from alerts import listeners, operators, rules, summaries
from alerts.models import AlertDelivery, AlertEpisode, AlertMessage, AlertMute
from database import utcnow
from extensions import db
from taskrunner import delivery, runner, schedules
from taskrunner.contract import publishing
from taskrunner.ledger import Actor, ledger
from taskrunner.models import OutboxEvent
from tasks.routing import routes
from tests.alert_receivers import HttpReceiver, drain, relay_now
from tests.web.backoffice_support import finished_run

SECRET = "whsec-test-0123456789"


@pytest.fixture
def receiver():
    server = HttpReceiver()
    yield server
    server.close()


@pytest.fixture
def alerting(make_app, controlled, receiver):
    """An app whose alerts go to the receiver, as a signed generic webhook."""

    def build(**settings):
        app = make_app(
            ALERT_WEBHOOK_URL=receiver.url,
            ALERT_WEBHOOK_SECRET=SECRET,
            BACKOFFICE_URL="https://backoffice.example.test",
            **settings,
        )
        return app

    return build


def run_of(controlled, units: int, failing: set[str]) -> str:
    controlled.failing = failing
    handle = runner.start("tests.controlled", {"units": units}, "test")
    drain("tasks", "default")
    return handle.uuid


def test_a_failed_run_alerts_once_and_the_next_clean_run_resolves(alerting, controlled, receiver):
    with alerting().app_context():
        first = run_of(controlled, 3, {"k1", "k2"})
        run_of(controlled, 3, {"k1"})  # the same episode: no second alert, no reminder yet
        run_of(controlled, 2, set())

    assert receiver.kinds() == ["opened", "resolved"]
    opened, resolved = (r.json for r in receiver.received)
    assert opened["rule"] == "run_failed" and opened["key"] == "tests.controlled"
    assert ["Failed units", "2 of 3"] in opened["facts"]
    assert opened["error_groups"][0]["count"] == 2
    assert opened["error_groups"][0]["kind"] == "domain"
    run_url = f"https://backoffice.example.test/backoffice/task-runs/{first}"
    assert {"label": "Run", "url": run_url} in opened["links"]
    assert resolved["episode"] == opened["episode"] and resolved["seq"] == 2


def handed_over_again(name: str, run_uuid: str) -> None:
    """As if the process that closed the run died between its commit and its delivery:
    the relay hands the run's event to every subscriber again."""
    ids = [
        e.id
        for e in db.session.execute(select(OutboxEvent).where(OutboxEvent.name == name)).scalars()
        if e.payload["run_uuid"] == run_uuid
    ]
    assert ids
    db.session.execute(update(OutboxEvent).where(OutboxEvent.id.in_(ids)).values(delivered_at=None))
    db.session.commit()
    relay_now()
    drain("default")


def test_a_failure_handed_over_again_after_its_episode_resolved_sends_nothing(
    alerting, controlled, receiver
):
    with alerting().app_context():
        failed = run_of(controlled, 2, {"k1"})
        run_of(controlled, 2, set())
        handed_over_again("tasks.run.failed", failed)
        states = db.session.execute(select(AlertEpisode.state)).scalars().all()

    assert receiver.kinds() == ["opened", "resolved"]
    assert states == ["resolved"]


def test_a_late_completion_of_an_older_run_leaves_a_newer_failure_open(
    alerting, controlled, receiver
):
    with alerting().app_context():
        clean = run_of(controlled, 2, set())
        run_of(controlled, 2, {"k1"})  # ended after the clean run
        handed_over_again("tasks.run.completed", clean)
        states = db.session.execute(select(AlertEpisode.state)).scalars().all()

    assert receiver.kinds() == ["opened"]
    assert states == ["open"]


def test_a_failure_told_after_a_newer_clean_run_of_its_type_opens_nothing(
    alerting, controlled, receiver, monkeypatch
):
    # The process that closed the failed run died before it handed the event over; the
    # relay hands it over only after a later run of the type ended clean: the type is
    # well again, no alert opens for the past.
    with alerting().app_context():
        with monkeypatch.context() as died:
            died.setattr(delivery, "deliver", lambda events: None)
            failed = run_of(controlled, 2, {"k1"})
        run_of(controlled, 2, set())
        handed_over_again("tasks.run.failed", failed)
        episodes = db.session.execute(select(AlertEpisode)).scalars().all()

    assert receiver.kinds() == [] and episodes == []


def test_a_run_under_its_types_threshold_does_not_alert(alerting, controlled, receiver):
    app = alerting(ALERT_RUN_FAILED_TYPES="tests.controlled=2:0.5")
    with app.app_context():
        run_of(controlled, 4, {"k1"})  # one failed of four: under both
        run_of(controlled, 4, {"k1", "k2", "k3"})  # three of four: over both
    assert receiver.kinds() == ["opened"]


def test_an_open_episode_is_reminded_only_after_the_interval(alerting, controlled, receiver):
    app = alerting(
        ALERT_RULES="queue_long_wait", ALERT_QUEUE_WAIT_MINUTES="*=30", ALERT_REMIND_MINUTES=60
    )
    with app.app_context():
        controlled.failing = set()
        runner.start("tests.controlled", {"units": 1}, "test")  # waits: nobody drains
        start = utcnow()
        for minutes in (31, 50, 89, 92, 120):
            rules.evaluate(start + timedelta(minutes=minutes))
            drain("default")
        drain("tasks")
        rules.evaluate(start + timedelta(minutes=121))  # the wait is over, inside the window
        drain("default")
        rules.evaluate(start + timedelta(minutes=127))
        drain("default")

    assert receiver.kinds() == ["opened", "reminder", "resolved"]
    assert receiver.received[0].json["key"] == "tasks"


def test_stale_units_flapping_inside_the_window_are_one_alert_and_one_resolved(
    alerting, controlled, receiver
):
    app = alerting(
        ALERT_RULES="stale_units",
        ALERT_STALE_UNITS=2,
        ALERT_STALE_MINUTES=10,
        TASK_RUNNER_NEVER_STARTED_SECONDS=60,
    )
    with app.app_context():
        controlled.failing = set()
        runner.start("tests.controlled", {"units": 2}, "test")
        t0 = utcnow()

        def at(minutes: float) -> None:
            rules.evaluate(t0 + timedelta(minutes=minutes))
            drain("default")

        def run_one() -> None:
            from tasks.queues import queues

            huey = queues().huey("tasks")
            huey.execute(huey.dequeue())

        at(2)  # two stale: the condition starts, the window runs
        run_one()
        at(5)  # one: a flap inside the window
        runner.start("tests.controlled", {"units": 1}, "test")
        at(12)  # two again, ten minutes after it started: the alert
        run_one()
        at(15)  # one: a flap, the episode goes on
        runner.start("tests.controlled", {"units": 1}, "test")
        at(18)
        drain("tasks")
        at(20)
        at(27)  # clear for nine minutes: still inside the window
        at(29)  # clear for eleven: resolved

    assert receiver.kinds() == ["opened", "resolved"]
    assert receiver.received[0].json["rule"] == "stale_units"


def test_a_muted_rule_sends_nothing_while_its_episodes_go_on(alerting, controlled, receiver):
    with alerting().app_context():
        with publishing():
            db.session.add(
                AlertMute(rule="run_failed", until=utcnow() + timedelta(hours=1), muted_by="t")
            )
        run_of(controlled, 2, {"k1"})
        opened = db.session.execute(select(AlertEpisode.rule, AlertEpisode.state)).one()
        run_of(controlled, 2, set())
        resolved = db.session.execute(select(AlertEpisode.state)).scalar_one()
    assert receiver.kinds() == []
    assert tuple(opened) == ("run_failed", "open") and resolved == "resolved"


def test_a_condition_that_opened_during_a_mute_is_announced_once_when_the_mute_ends(
    alerting, controlled, receiver
):
    app = alerting(
        ALERT_RULES="queue_long_wait", ALERT_QUEUE_WAIT_MINUTES="*=30", ALERT_REMIND_MINUTES=0
    )
    with app.app_context():
        controlled.failing = set()
        runner.start("tests.controlled", {"units": 1}, "test")  # waits: nobody drains
        start = utcnow()
        operators.mute("queue_long_wait", Actor("ops@example.com"), now=start)  # for 60 min
        heard = {}
        for minutes in (31, 59, 61, 90, 180):  # opens at 31, still waiting after the mute
            rules.evaluate(start + timedelta(minutes=minutes))
            drain("default")
            heard[minutes] = receiver.kinds()

    assert heard[59] == []
    assert heard[61] == heard[180] == ["opened"]
    assert receiver.received[0].json["key"] == "tasks"


def test_a_failed_run_during_a_mute_is_announced_by_the_first_evaluation_after_it(
    alerting, controlled, receiver
):
    with alerting(ALERT_RULES="run_failed", ALERT_REMIND_MINUTES=0).app_context():
        start = utcnow()
        operators.mute("run_failed", Actor("ops@example.com"), now=start)
        run_of(controlled, 2, {"k1"})
        rules.evaluate(start + timedelta(minutes=30))
        drain("default")
        during = receiver.kinds()
        for minutes in (61, 90, 300):
            rules.evaluate(start + timedelta(minutes=minutes))
            drain("default")

    assert during == []
    assert receiver.kinds() == ["opened"]
    assert receiver.received[0].json["rule"] == "run_failed"


def test_an_announced_episode_resolved_during_a_mute_sends_its_resolved_once_when_it_ends(
    alerting, controlled, receiver
):
    # The "resolved" was swallowed by the mute: a receiver that tracks incidents kept the
    # episode open for ever, though the ledger had it resolved.
    with alerting(ALERT_RULES="run_failed", ALERT_REMIND_MINUTES=0).app_context():
        run_of(controlled, 2, {"k1"})
        start = utcnow()
        operators.mute("run_failed", Actor("ops@example.com"), now=start)
        run_of(controlled, 2, set())  # resolves, muted
        heard = {}
        for minutes in (30, 61, 90, 300):
            rules.evaluate(start + timedelta(minutes=minutes))
            drain("default")
            heard[minutes] = receiver.kinds()

    assert heard[30] == ["opened"]
    assert heard[61] == heard[300] == ["opened", "resolved"]
    opened, resolved = (r.json for r in receiver.received)
    assert resolved["episode"] == opened["episode"] and resolved["seq"] == 2


def test_a_schedule_that_misses_its_slots_alerts_once_and_resolves_when_it_runs_again(
    alerting, receiver
):
    # The schedules' own watch raises the events (three slots missed, then a slot run).
    sweep, t0, period = "taskrunner.detect_stuck", datetime(2026, 3, 1, 12, 0), 300
    grace = timedelta(seconds=2 * period)

    def ran(slot: datetime, at: datetime) -> None:
        assert ledger.schedules.claim(sweep, slot, "host-a:1", now=at)
        ledger.schedules.finish(sweep, slot, None, None, now=at)

    with alerting(ALERT_RULES="schedule_missed").app_context():
        ran(t0, t0)
        for k in (1, 2, 3):
            slot = t0 + timedelta(seconds=period * k)
            schedules.watch(now=slot + grace + timedelta(seconds=1))
            drain("default")
        back = t0 + timedelta(seconds=period * 4)
        ran(back, back + timedelta(seconds=700))
        schedules.watch(now=back + timedelta(seconds=701))
        drain("default")

    sent = [r.json for r in receiver.received if r.json["key"] == sweep]
    assert [alert["kind"] for alert in sent] == ["opened", "resolved"]
    assert sent[0]["rule"] == "schedule_missed"


def test_a_missed_schedule_removed_from_the_code_ends_its_episode_once_and_reminds_no_more(
    alerting, receiver, monkeypatch
):
    # Its slots were missed; then a deploy left its declaration out (its rows remain):
    # nothing will ever run it again, so nothing else would end its episode.
    sweep, grace = "taskrunner.detect_stuck", 600
    now = utcnow().replace(second=0, microsecond=0)
    t0 = now - timedelta(hours=1, minutes=now.minute % 5)  # a slot of its 5-minute grid
    app = alerting(ALERT_RULES="schedule_missed", ALERT_REMIND_MINUTES=60)
    with app.app_context():
        assert ledger.schedules.claim(sweep, t0, "host-a:1", now=t0)
        ledger.schedules.finish(sweep, t0, None, None, now=t0)
        schedules.watch(now=t0 + timedelta(seconds=300 + grace + 1))
        drain("default")
        monkeypatch.delitem(routes.periodic, sweep)
        for hours in (2, 4, 6):  # reminders would be due at each
            rules.evaluate(now + timedelta(hours=hours))
            drain("default")
        states = db.session.execute(
            select(AlertEpisode.state).where(AlertEpisode.key == sweep)
        ).scalars()

    sent = [r.json for r in receiver.received if r.json["key"] == sweep]
    assert [alert["kind"] for alert in sent] == ["opened", "resolved"]
    assert ["Ended", "schedule no longer declared"] in sent[1]["facts"]
    assert list(states) == ["resolved"]


def test_open_episodes_are_counted_per_rule_in_the_metrics(alerting, controlled):
    app = alerting(METRICS_TOKEN="scrape-token")
    with app.app_context():
        run_of(controlled, 2, {"k1"})
    body = (
        app.test_client()
        .get("/metrics", headers={"Authorization": "Bearer scrape-token"})
        .get_data(as_text=True)
    )
    assert 'taskledger_alert_episodes_open{rule="run_failed"} 1.0' in body
    assert 'taskledger_alert_episodes_open{rule="stale_units"} 0.0' in body


def test_an_open_episode_of_an_event_rule_is_reminded_by_the_evaluation(
    alerting, controlled, receiver
):
    app = alerting(ALERT_RULES="run_failed", ALERT_REMIND_MINUTES=60)
    with app.app_context():
        run_of(controlled, 2, {"k1"})
        now = utcnow()
        for minutes in (30, 61, 90, 122):
            rules.evaluate(now + timedelta(minutes=minutes))
            drain("default")

    assert receiver.kinds() == ["opened", "reminder", "reminder"]
    assert ["Duration", "2 h 2 min"] in receiver.received[-1].json["facts"]


@pytest.mark.parametrize("rule", ["run_failed", "queue_long_wait"])
def test_a_rule_switched_off_while_open_ends_its_episode_once_and_reminds_no_more(
    alerting, controlled, receiver, rule
):
    settings = {
        "ALERT_REMIND_MINUTES": 60,
        "ALERT_QUEUE_WAIT_MINUTES": "*=30",
        "METRICS_TOKEN": "scrape-token",
    }
    start = utcnow()
    with alerting(ALERT_RULES=rule, **settings).app_context():
        if rule == "run_failed":
            run_of(controlled, 2, {"k1"})
        else:
            controlled.failing = set()
            runner.start("tests.controlled", {"units": 1}, "test")  # waits: nobody drains
            rules.evaluate(start + timedelta(minutes=31))
            drain("default")
    switched_off = alerting(ALERT_RULES="", **settings)
    with switched_off.app_context():
        for minutes in (95, 200, 400):  # reminders would be due at each
            rules.evaluate(start + timedelta(minutes=minutes))
            drain("default")
        states = db.session.execute(select(AlertEpisode.state)).scalars().all()
    scraped = (
        switched_off.test_client()
        .get("/metrics", headers={"Authorization": "Bearer scrape-token"})
        .get_data(as_text=True)
    )

    assert receiver.kinds() == ["opened", "resolved"]
    ended = receiver.received[1].json
    assert ended["title"].endswith("(rule switched off)")
    assert ["Ended", "rule switched off"] in ended["facts"]
    assert states == ["resolved"]
    assert f'taskledger_alert_episodes_open{{rule="{rule}"}} 0.0' in scraped


def test_episodes_resolved_before_the_retention_are_pruned_with_their_messages(
    alerting, controlled, receiver
):
    with alerting(TASK_RUNNER_RETENTION_DAYS=30).app_context():
        run_of(controlled, 2, {"k1"})
        run_of(controlled, 2, set())  # resolved now
        run_of(controlled, 2, {"k1"})  # open
        assert rules.prune(utcnow() + timedelta(days=29)) == 0
        assert rules.prune(utcnow() + timedelta(days=31)) == 1
        left = db.session.execute(select(AlertEpisode.state)).scalars().all()
        messages = db.session.execute(select(func.count()).select_from(AlertMessage)).scalar()
        deliveries = db.session.execute(select(func.count()).select_from(AlertDelivery)).scalar()
    assert (left, messages, deliveries) == (["open"], 1, 1)


def test_a_failed_run_is_read_once_to_judge_its_event(alerting, controlled, receiver, monkeypatch):
    # An older failure told (its episode since resolved by a clean run): the new failure
    # is judged against both, and reads its own run once for its summary and both.
    with alerting().app_context():
        run_of(controlled, 2, {"k1"})
        run_of(controlled, 2, set())
        with monkeypatch.context() as died:
            died.setattr(delivery, "deliver", lambda events: None)
            failed = run_of(controlled, 2, {"k1"})
        (event,) = [
            delivery.event_dict(e)
            for e in db.session.execute(
                select(OutboxEvent).where(OutboxEvent.name == "tasks.run.failed")
            ).scalars()
            if e.payload["run_uuid"] == failed
        ]
        db.session.remove()
        reads = []

        def count(conn, cursor, statement, parameters, context, executemany):
            if "FROM task_runs" in statement and failed in str(parameters):
                reads.append(statement)

        sa_event.listen(db.engine, "before_cursor_execute", count)
        try:
            listeners.on_run_failed(event)
        finally:
            sa_event.remove(db.engine, "before_cursor_execute", count)
        drain("default")

    assert len(reads) == 1, reads
    assert receiver.kinds() == ["opened", "resolved", "opened"]


def test_a_failed_runs_alert_counts_each_tenant_once(ctx):
    # Tenant 7 failed in two groups: one tenant affected, not two.
    failing = {"a": "vendor timed out", "b": "address missing", "c": "vendor timed out"}
    run_uuid = finished_run(
        "tests.tenants", ["a", "b", "c", "d"], failing, {"a": 7, "b": 7, "c": 8}
    )
    payload = {
        "run_uuid": run_uuid,
        "type": "tests.tenants",
        "status": "completed_with_failures",
        "units_failed": 3,
        "units_total": 4,
        "units_completed": 1,
    }

    summary = summaries.run_failed(payload, ledger.runs.get_run(run_uuid))

    assert summary["tenants"] == 2
    assert {g["reason"]: g["count"] for g in summary["error_groups"]} == {
        "vendor timed out": 2,
        "address missing": 1,
    }
