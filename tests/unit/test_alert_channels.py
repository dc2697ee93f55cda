"""The channels against real receivers: a Slack-compatible and a generic webhook served by
an HTTP server in the test process (the signature checked by the test's own HMAC code),
email through a real SMTP server (aiosmtpd). Routing from the settings; a run whose units
fail with vendor errors carrying secrets: no secret in any body received."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from alerts.models import AlertDelivery
from extensions import db
from taskrunner import runner
from taskrunner.models import EventDelivery
from tests.alert_receivers import (
    HttpReceiver,
    SmtpReceiver,
    drain,
    relay_now,
    self_signed,
    verify_signature,
)
from tests.conftest import IN_CI
from tests.leaky_types import FOUND, LEAKY, LeakyTask

SECRET = "whsec-channels-0123456789"
BASE = "https://backoffice.example.test"


@pytest.fixture
def slack():
    server = HttpReceiver()
    yield server
    server.close()


@pytest.fixture
def hook():
    server = HttpReceiver()
    yield server
    server.close()


@pytest.fixture
def smtp():
    server = SmtpReceiver()
    yield server
    server.close()


@pytest.fixture
def channels(make_app, slack, hook, smtp):
    def build(**settings):
        return make_app(
            ALERT_SLACK_WEBHOOK_URL=slack.url,
            ALERT_WEBHOOK_URL=hook.url,
            ALERT_WEBHOOK_SECRET=SECRET,
            ALERT_EMAIL_TO="oncall@example.test, lead@example.test",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=smtp.port,
            SMTP_SECURITY="none",
            SMTP_FROM="alerts@example.test",
            BACKOFFICE_URL=BASE,
            **settings,
        )

    return build


def failed_run(controlled, units: int = 3) -> str:
    controlled.failing = {f"k{i}" for i in range(1, units)}
    handle = runner.start("tests.controlled", {"units": units}, "test")
    drain("tasks", "default")
    return handle.uuid


def test_slack_gets_text_and_blocks_with_links_into_the_backoffice(channels, controlled, slack):
    with channels(ALERT_ROUTES="*=slack").app_context():
        run_uuid = failed_run(controlled)

    [message] = slack.received
    body = message.json
    assert body["text"].startswith("Alert: tests.controlled completed with failures")
    assert body["blocks"][0]["type"] == "header"
    links = body["blocks"][-1]["elements"][0]["text"]
    assert f"<{BASE}/backoffice/task-runs/{run_uuid}|Run>" in links
    assert f"<{BASE}/backoffice/task-runs/{run_uuid}/errors|Error groups>" in links
    assert "2 × `domain` unit k# broke" in json.dumps(body["blocks"], ensure_ascii=False)


def test_the_generic_webhook_is_signed_and_carries_an_idempotency_key(channels, controlled, hook):
    with channels(ALERT_ROUTES="*=webhook").app_context():
        failed_run(controlled)

    [message] = hook.received
    assert verify_signature(SECRET, message.headers["Taskledger-Signature"], message.body)
    assert not verify_signature(
        "another secret", message.headers["Taskledger-Signature"], message.body
    )
    assert not verify_signature(
        SECRET, message.headers["Taskledger-Signature"], message.body.replace(b"2", b"3")
    )
    body = message.json
    assert message.headers["Idempotency-Key"] == f"{body['episode']}:1"
    assert body["kind"] == "opened" and body["rule"] == "run_failed"
    assert ["Failed units", "2 of 3"] in body["facts"]
    assert body["error_groups"] == [{"reason": "unit k# broke", "kind": "domain", "count": 2}]
    assert body["tenants"] == 0


def test_email_goes_through_a_real_smtp_server(channels, controlled, smtp):
    with channels(ALERT_ROUTES="*=email").app_context():
        run_uuid = failed_run(controlled)

    [message] = smtp.handler.messages
    assert message["Subject"].strip().startswith("[Taskledger] Alert: tests.controlled")
    assert message["To"] == "oncall@example.test, lead@example.test"
    text = message.get_payload(decode=True).decode()
    assert f"Run: {BASE}/backoffice/task-runs/{run_uuid}" in text
    assert "2 × [domain] unit k# broke" in text


@pytest.mark.parametrize("server", ["refuses one recipient", "answers QUIT with 421"])
def test_an_email_the_server_accepted_is_delivered_once_and_the_episode_goes_on(
    make_app, controlled, smtp, server
):
    if server == "refuses one recipient":
        smtp.handler.refused = {"gone@example.test"}
    else:
        smtp.handler.quit_answer = "421 4.3.2 shutting down"
    app = make_app(
        ALERT_EMAIL_TO="oncall@example.test, gone@example.test",
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=smtp.port,
        SMTP_SECURITY="none",
        TASK_RUNNER_EVENT_RETRY_SECONDS=0,
    )
    with app.app_context():
        failed_run(controlled)
        controlled.failing = set()
        runner.start("tests.controlled", {"units": 1}, "test")
        drain("tasks", "default")
        for _ in range(3):  # every refusal would be due again
            relay_now()
        deliveries = db.session.execute(
            select(AlertDelivery).order_by(AlertDelivery.message_id)
        ).scalars()
        recorded = [(d.attempts, d.delivered_at is not None, d.last_error) for d in deliveries]

    subjects = [m["Subject"].strip().split(":")[0] for m in smtp.handler.messages]
    assert subjects == ["[Taskledger] Alert", "[Taskledger] Resolved"]
    assert recorded == [(1, True, None), (1, True, None)]
    if server == "refuses one recipient":
        assert smtp.handler.recipients == [["oncall@example.test"]] * 2


def test_rules_are_routed_to_the_channels_the_settings_name(
    channels, controlled, slack, hook, smtp
):
    with channels(ALERT_ROUTES="run_failed=email+webhook,*=slack").app_context():
        failed_run(controlled)

    assert (len(slack.received), len(hook.received), len(smtp.handler.messages)) == (0, 1, 1)


def test_no_secret_of_a_vendor_failure_reaches_any_alert_body(
    channels, make_app, slack, hook, smtp
):
    make_app.register(LeakyTask())
    with channels().app_context():
        runner.start(LEAKY, {"units": 3}, "test")
        drain("tasks", "default")

    texts = [r.body.decode() for r in slack.received + hook.received] + [
        f"{m['Subject']}\n{m.get_content()}" for m in smtp.handler.messages
    ]
    assert len(texts) == 3
    for text in texts:
        assert "vendor refused the export" in text  # the reason is there, its secrets not
        assert not FOUND.search(text), text


def test_a_refusal_names_no_receiver_url_and_no_secret_of_its_answer(make_app, controlled):
    server = HttpReceiver()
    server.status = 502
    token_url = server.url.replace("/hook", "/services/T0001/B0001/XoxbSecretToken123")
    try:
        with make_app(ALERT_SLACK_WEBHOOK_URL=token_url).app_context():
            failed_run(controlled)
            [refusal] = db.session.execute(select(EventDelivery)).scalars()
    finally:
        server.close()
    assert refusal.last_error == "slack answered 502 receiver down"
    assert "XoxbSecretToken123" not in refusal.last_error


def test_the_readmes_verification_snippet_accepts_a_real_signed_alert(channels, controlled, hook):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    snippet = readme.split("```python\nimport hashlib, hmac, time\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec("import hashlib, hmac, time\n" + snippet, namespace)  # the README's own code
    with channels(ALERT_ROUTES="*=webhook").app_context():
        failed_run(controlled)

    [message] = hook.received
    header = message.headers["Taskledger-Signature"]
    assert namespace["verify"](SECRET, header, message.body)
    assert not namespace["verify"](SECRET, header, message.body + b" ")


# aiosmtpd cannot tell that a connection TLS from its first byte is TLS.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.parametrize("security", ["starttls", "ssl"])
def test_email_over_tls_authenticates_with_the_settings(
    make_app, controlled, tmp_path, monkeypatch, security
):
    if shutil.which("openssl") is None:
        (pytest.fail if IN_CI else pytest.skip)(
            "the openssl command is missing (.ci/run installs it)"
        )
    context, cert = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this server alone
    server = SmtpReceiver(tls=context, mode=security, login=("alerts", "smtp-pass-0123"))
    try:
        app = make_app(
            ALERT_EMAIL_TO="oncall@example.test",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=server.port,
            SMTP_SECURITY=security,
            SMTP_USER="alerts",
            SMTP_PASSWORD="smtp-pass-0123",
        )
        with app.app_context():
            failed_run(controlled)
        wrong = make_app(
            ALERT_EMAIL_TO="oncall@example.test",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=server.port,
            SMTP_SECURITY=security,
            SMTP_USER="alerts",
            SMTP_PASSWORD="not-the-password",
        )
        result = wrong.test_cli_runner().invoke(args=["alerts", "test"])
    finally:
        server.close()

    assert server.logins == ["alerts"] and len(server.handler.messages) == 1
    assert result.exit_code == 1
    # The server refused the login (535), not a read that timed out.
    assert result.output.startswith("email: FAILED answered 535")
    assert "not-the-password" not in result.output


def test_slack_shows_a_reason_quoting_slack_markup_as_text_never_a_mention_or_a_link(
    channels, controlled, slack
):
    # A tenant's input echoed in a unit's reason pinged the whole channel and showed a
    # link of the input's choosing under a label of its choosing.
    from tests.factories import Broken

    def refuse(unit):
        raise Broken("input <!channel> & <https://evil.example/login|open the run> refused")

    controlled.during = refuse
    with channels(ALERT_ROUTES="*=slack").app_context():
        failed_run(controlled, units=1)

    [message] = slack.received
    sent = json.dumps(message.json, ensure_ascii=False)
    assert "<!channel>" not in sent and "<https://evil.example" not in sent
    escaped = "input &lt;!channel&gt; &amp; &lt;https://evil.example/login|open the run&gt;"
    assert escaped in message.json["text"] and escaped in sent.split('"blocks"', 1)[1]


def test_a_line_break_in_a_type_name_is_no_header_of_the_email_and_stops_no_alert(make_app, smtp):
    # The type's name went into the Subject as it was: the email was refused at each try
    # ("could not be sent (ValueError)") and parked, and no header could be added through it.
    # Registration refuses such a name now; the runs of a release before it still hold it.
    from taskrunner.registry import registry
    from tests.factories import ControlledTask

    task = ControlledTask("tests.broken\r\nBcc: attacker@example.test")
    app = make_app(
        ALERT_EMAIL_TO="oncall@example.test",
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=smtp.port,
        SMTP_SECURITY="none",
    )
    with app.app_context():
        registry.register(task)
        task.failing = {"k1"}
        runner.start(task.type(), {"units": 1}, "test")
        drain("tasks", "default")

    [message] = smtp.handler.messages
    assert message["Bcc"] is None and smtp.handler.recipients == [["oncall@example.test"]]
    assert message["Subject"].startswith("[Taskledger] Alert: tests.broken Bcc: attacker@")


def test_a_slack_alert_of_reasons_full_of_markup_keeps_within_slacks_block_limits():
    # Escaped, three reasons of 500 characters of <> made a section of over 3000
    # characters, which Slack refuses (invalid_blocks): the alert never reached Slack.
    from alerts.channels import SlackChannel

    groups = [{"count": 1, "kind": "vendor", "reason": c * 500} for c in "<>&"]
    body = {"episode": "e", "seq": 1, "title": "t", "text": "<" * 500, "error_groups": groups}
    payload = SlackChannel("https://hooks.example.test/x", BASE, 5).payload(
        {**body, "facts": [["k", "&" * 500]]}
    )

    for block in payload["blocks"]:
        if block["type"] == "section":
            assert all(len(f["text"]) <= 2000 for f in block.get("fields", []))
            assert len(block.get("text", {}).get("text", "")) <= 3000


def test_an_email_test_to_one_recipient_says_one_recipient(make_app, smtp):
    app = make_app(
        ALERT_EMAIL_TO="oncall@example.test",
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=smtp.port,
        SMTP_SECURITY="none",
    )
    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    assert tested.output == "email: ok accepted for 1 recipient\n"
