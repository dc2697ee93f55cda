"""Operators and the alerts: the Alerts page (open and recent episodes with their
deliveries), "Mute for 1 h…" (confirmed, CSRF, audited), ``flask alerts test`` and
``flask alerts list``."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from extensions import db
from taskrunner import runner
from taskrunner.models import OperatorAction
from tests.alert_receivers import HttpReceiver, SmtpReceiver, drain
from tests.web.backoffice_support import MANAGE, VIEW, browser, make_user, sign_in


@pytest.fixture
def hook():
    server = HttpReceiver()
    yield server
    server.close()


@pytest.fixture
def alerting(make_app, controlled, hook):
    return make_app(ALERT_WEBHOOK_URL=hook.url)


def episode(controlled, failing: set[str]) -> None:
    controlled.failing = failing
    runner.start(controlled.type(), {"units": 2}, "test")
    drain("tasks", "default")


def signed_in(app, *permissions: str):
    with app.app_context():
        user = make_user("operator@example.com", *permissions)
    web = browser(app)
    sign_in(web, user)
    return web


def form_for(page, action: str):
    [form] = [f for f in page.forms.values() if f.action == action]
    return form


def test_the_alerts_page_lists_open_and_recent_episodes_with_their_deliveries(
    alerting, controlled, hook
):
    with alerting.app_context():
        episode(controlled, {"k1"})
        episode(controlled, set())  # resolved
        episode(controlled, {"k1", "k2"})  # a new episode, open
    web = signed_in(alerting, VIEW)
    page = web.get("/backoffice/alerts")

    open_part, recent_part = page.text.split('id="recent-h"')
    assert "tests.backoffice failed: 2 failed units" in open_part
    assert "#1 opened → webhook: delivered" in open_part
    assert "#2 resolved → webhook: delivered" in recent_part
    assert "Mute for 1 h" not in page.text  # a viewer has no action
    assert 'aria-current="page">Alerts</a>' in page.text


def test_mute_for_an_hour_is_confirmed_audited_and_silences_the_rule(alerting, controlled, hook):
    # Requests outside the app context: each one has its own (its CSRF token included).
    web = signed_in(alerting, VIEW, MANAGE)
    page = web.get("/backoffice/alerts")
    confirm = form_for(page, "/backoffice/alerts/rules/run_failed/mute").submit()
    assert "Mute run_failed for 1 h" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert "run_failed muted until" in done.text
    with alerting.app_context():
        [action] = db.session.execute(select(OperatorAction)).scalars()
        assert (action.action, action.actor, action.source) == (
            "alerts.mute",
            "operator@example.com",
            "web",
        )
        assert action.detail["rule"] == "run_failed"
        episode(controlled, {"k1"})

    assert hook.received == []


def test_a_mute_without_csrf_or_of_an_unknown_rule_is_refused(alerting):
    web = signed_in(alerting, VIEW, MANAGE)
    web.post("/backoffice/alerts/rules/run_failed/mute", {"confirm": "yes"}, status=400)
    page = web.get("/backoffice/alerts")
    token = form_for(page, "/backoffice/alerts/rules/run_failed/mute")["csrf_token"].value
    web.post("/backoffice/alerts/rules/nope/mute", {"csrf_token": token}, status=404)
    with alerting.app_context():
        assert db.session.execute(select(OperatorAction)).first() is None


def test_alerts_test_prints_each_answer_and_fails_when_one_failed(make_app, hook):
    down = HttpReceiver()
    down.status = 503
    try:
        app = make_app(ALERT_WEBHOOK_URL=hook.url, ALERT_SLACK_WEBHOOK_URL=down.url)
        result = app.test_cli_runner().invoke(args=["alerts", "test"])
        only = app.test_cli_runner().invoke(args=["alerts", "test", "--channel", "webhook"])
    finally:
        down.close()

    assert result.exit_code == 1
    assert "slack: FAILED answered 503 receiver down" in result.output
    assert "webhook: ok 200 ok" in result.output
    assert only.exit_code == 0 and only.output == "webhook: ok 200 ok\n"
    assert [r.json["kind"] for r in hook.received] == ["test", "test"]


def test_each_test_send_is_a_new_message_a_receiver_that_drops_repeats_still_takes(make_app, hook):
    # Every test send carried Idempotency-Key test:1 and Message-ID <test.1@taskledger>: a
    # receiver that drops a key it has seen, or a mailbox that drops a Message-ID it has,
    # took the first test only, and each later "ok" reached no one.
    smtp = SmtpReceiver()
    try:
        app = make_app(
            ALERT_WEBHOOK_URL=hook.url,
            ALERT_EMAIL_TO="oncall@example.test",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=smtp.port,
            SMTP_SECURITY="none",
        )
        for _ in range(2):
            assert app.test_cli_runner().invoke(args=["alerts", "test"]).exit_code == 0
    finally:
        smtp.close()

    keys = [r.headers["Idempotency-Key"] for r in hook.received]
    message_ids = [m["Message-ID"] for m in smtp.handler.messages]
    assert len(keys) == 2 and len(set(keys)) == 2
    assert len(message_ids) == 2 and len(set(message_ids)) == 2


def test_alerts_test_refuses_a_channel_that_is_not_configured(make_app):
    result = make_app().test_cli_runner().invoke(args=["alerts", "test", "--channel", "email"])
    assert result.exit_code == 1
    assert result.stderr == "error: channel email is not configured\n"


def test_alerts_list_shows_the_rules_and_open_episodes(alerting, controlled):
    with alerting.app_context():
        episode(controlled, {"k1"})
    result = alerting.test_cli_runner().invoke(args=["alerts", "list", "--json"])
    listing = json.loads(result.output)
    assert result.exit_code == 0
    assert {
        "name": "run_failed",
        "enabled": True,
        "channels": ["webhook"],
        "muted_until": None,
    } in (listing["rules"])
    [open_episode] = listing["open_episodes"]
    assert (open_episode["rule"], open_episode["key"]) == ("run_failed", controlled.type())
    text = alerting.test_cli_runner().invoke(args=["alerts", "list"]).output
    assert "run_failed         on  → webhook" in text


def test_a_malformed_alert_setting_is_one_line_in_the_cli_and_named_on_the_page(make_app):
    app = make_app(ALERT_ROUTES="run_failed=pager", ALERT_SLACK_WEBHOOK_URL="http://127.0.0.1:9/")
    for args in (["alerts", "list"], ["alerts", "list", "--json"]):
        result = app.test_cli_runner().invoke(args=args)
        assert result.exit_code == 1
        assert result.stderr == "error: ALERT_ROUTES: unknown channel 'pager'\n"
    page = signed_in(app, VIEW).get("/backoffice/alerts")
    assert "ALERT_ROUTES: unknown channel" in page.text


def test_alerts_test_refuses_a_receiver_url_that_is_not_http(make_app):
    app = make_app(ALERT_WEBHOOK_URL="file:///etc/passwd")
    result = app.test_cli_runner().invoke(args=["alerts", "test"])
    assert result.exit_code == 1
    assert result.output == "webhook: FAILED its URL is not an http or https URL\n"
