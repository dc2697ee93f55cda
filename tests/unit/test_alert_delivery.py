"""Alerts leave through the event outbox, one subscriber per channel: a receiver that was
down gets every alert once and in order when it is back, one that keeps refusing parks
(the parked events page shows it, a redelivery sends it), and a slow one is cut off at
the timeout without holding up the others."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from alerts.models import AlertDelivery
from extensions import db
from taskrunner import delivery, runner
from taskrunner.models import EventDelivery
from tests.alert_receivers import HttpReceiver, drain, relay_now
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in


@pytest.fixture
def receivers():
    made = [HttpReceiver(), HttpReceiver()]
    yield made
    for server in made:
        server.close()


def fail_then_recover(controlled) -> None:
    controlled.failing = {"k1"}
    runner.start("tests.controlled", {"units": 2}, "test")
    drain("tasks", "default")
    controlled.failing = set()
    runner.start("tests.controlled", {"units": 1}, "test")
    drain("tasks", "default")


def test_a_receiver_down_then_back_gets_each_alert_once_in_order(make_app, controlled, receivers):
    hook, _ = receivers
    app = make_app(ALERT_WEBHOOK_URL=hook.url, TASK_RUNNER_EVENT_RETRY_SECONDS=0)
    with app.app_context():
        hook.status = 503
        fail_then_recover(controlled)  # opened and resolved, both refused
        relay_now()
        assert hook.received == [] and hook.refused >= 2
        hook.status = 200
        for _ in range(3):  # every pending delivery is retried, more than once
            relay_now()

    assert hook.kinds() == ["opened", "resolved"]
    assert [r.headers["Idempotency-Key"] for r in hook.received] == [
        f"{hook.received[0].json['episode']}:{seq}" for seq in (1, 2)
    ]


def test_a_receiver_that_keeps_refusing_parks_and_is_redelivered(make_app, controlled, receivers):
    hook, _ = receivers
    app = make_app(
        ALERT_WEBHOOK_URL=hook.url,
        TASK_RUNNER_EVENT_RETRY_SECONDS=0,
        TASK_RUNNER_EVENT_MAX_ATTEMPTS=2,
    )
    with app.app_context():
        hook.status = 500
        controlled.failing = {"k1"}
        runner.start("tests.controlled", {"units": 1}, "test")
        drain("tasks", "default")
        for _ in range(3):
            relay_now()
        [parked] = delivery.parked()
        assert parked.name == "alerts.alert"
        assert parked.subscriber == "alerts.sending.channel.webhook"
        assert parked.last_error == "webhook answered 500 receiver down"

        user = make_user("viewer@example.com", VIEW)
        client = browser(app)
        sign_in(client, user)
        page = client.get("/backoffice/parked-events")
        assert "alerts.alert" in page.text and "webhook answered 500" in page.text

        hook.status = 200
        assert delivery.redeliver_parked() == (1, 0)

    assert hook.kinds() == ["opened"]


def test_a_slow_receiver_is_cut_off_and_holds_up_no_other_channel(make_app, controlled, receivers):
    slow, quick = receivers
    slow.delay = 2.0
    app = make_app(
        ALERT_SLACK_WEBHOOK_URL=slow.url,
        ALERT_WEBHOOK_URL=quick.url,
        ALERT_TIMEOUT_SECONDS=0.3,
        TASK_RUNNER_EVENT_RETRY_SECONDS=0,
    )
    with app.app_context():
        controlled.failing = {"k1"}
        runner.start("tests.controlled", {"units": 1}, "test")
        drain("tasks", "default")
        refused = {
            d.subscriber: d.last_error for d in db.session.execute(select(EventDelivery)).scalars()
        }

    assert quick.kinds() == ["opened"]
    assert refused == {"alerts.sending.channel.slack": "slack no answer within 0.3 s"}


def test_one_alert_handed_to_a_channel_by_two_processes_at_once_is_sent_once(make_app, receivers):
    # The delivery job ran late, as the relay found the event: each read the message
    # undelivered and sent it, and the receiver got it twice.
    from alerts import rules, summaries
    from taskrunner.outbox import deliver_events
    from tests.interleave import InThread

    hook, _ = receivers
    hook.delay = 0.5
    app = make_app(ALERT_WEBHOOK_URL=hook.url, TASK_RUNNER_EVENT_RETRY_SECONDS=0)
    with app.app_context():
        ids = rules.judge_now(
            lambda e: e.raise_("consumer_lost", "all", summaries.consumers_lost({"lost": 1}))
        )
    job = InThread(app, "job", deliver_events, ids)
    relay = InThread(app, "relay", delivery.relay, older_than_seconds=0)
    job.join()
    relay.join()
    with app.app_context():
        relay_now()  # the one told "another process sends it" tries again: delivered

        assert hook.kinds() == ["opened"]
        assert db.session.scalars(select(EventDelivery)).all() == []  # none left to retry
        [sent] = db.session.scalars(select(AlertDelivery)).all()
        assert sent.delivered_at is not None and sent.sending_since is None
