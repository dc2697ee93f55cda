"""One channel's trouble is that channel's alone: a channel whose settings cannot be used
refuses its own sends while the others deliver, and every way a send can fail is the
channel's one-line refusal, naming neither the receiver's URL nor a secret."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from alerts import content
from alerts.channels import ChannelError, send_or_refuse
from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.models import EventDelivery
from tests.alert_receivers import HttpReceiver, SmtpReceiver, drain
from tests.unit.test_config_errors import assert_one_error_line, run

SMTP_SECURITY_REFUSAL = "SMTP_SECURITY: 'tls' is not one of none, starttls, ssl"


@pytest.fixture
def hook():
    server = HttpReceiver()
    yield server
    server.close()


def test_an_unusable_email_setting_leaves_the_other_channels_sending(make_app, controlled, hook):
    app = make_app(
        ALERT_WEBHOOK_URL=hook.url,
        ALERT_EMAIL_TO="oncall@example.test",
        SMTP_HOST="127.0.0.1",
        SMTP_SECURITY="tls",  # starttls was meant
    )
    with app.app_context():
        controlled.failing = {"k1"}
        runner.start("tests.controlled", {"units": 1}, "test")
        drain("tasks", "default")
        refused = {
            d.subscriber: d.last_error for d in db.session.execute(select(EventDelivery)).scalars()
        }
    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    assert hook.kinds() == ["opened", "test"]
    assert refused == {"alerts.sending.channel.email": f"email {SMTP_SECURITY_REFUSAL}"}
    assert tested.exit_code == 1
    assert tested.output == f"webhook: ok 200 ok\nemail: FAILED {SMTP_SECURITY_REFUSAL}\n"


WEBHOOK_PASSWORD = "WebhookPw-S3cret"
URL_WITH_PASSWORD = f"https://alertbot:{WEBHOOK_PASSWORD}@hooks.example.invalid/x"


def test_a_receiver_url_with_a_password_stops_the_cli_in_one_line_and_is_written_nowhere(
    tmp_path,
):
    done = run(
        ["-m", "flask", "--app", "app", "alerts", "test", "--channel", "webhook"],
        tmp_path,
        ALERT_WEBHOOK_URL=URL_WITH_PASSWORD,
    )

    assert_one_error_line(done, "ALERT_WEBHOOK_URL must not carry a user or password")
    assert WEBHOOK_PASSWORD not in done.stdout + done.stderr
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        assert WEBHOOK_PASSWORD.encode() not in path.read_bytes(), path


def test_a_receiver_url_with_a_password_is_that_channels_refusal_naming_no_part_of_it(
    make_app, hook, caplog
):
    app = make_app(ALERT_WEBHOOK_URL=URL_WITH_PASSWORD, ALERT_SLACK_WEBHOOK_URL=hook.url)

    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    assert tested.exit_code == 1
    assert tested.output.splitlines() == [
        "slack: ok 200 ok",
        "webhook: FAILED its URL carries a user or password (user:password@host)",
    ]
    assert WEBHOOK_PASSWORD not in caplog.text


def test_a_send_that_urllib_cannot_make_is_refused_and_the_next_channel_still_tested(
    make_app, hook, caplog
):
    # urllib's InvalidURL is no OSError, and its text quotes the port: here, a secret.
    app = make_app(
        ALERT_SLACK_WEBHOOK_URL=f"http://hooks.example.invalid:{WEBHOOK_PASSWORD}/services/x",
        ALERT_WEBHOOK_URL=hook.url,
    )

    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    assert tested.exit_code == 1
    assert tested.output == "slack: FAILED could not be sent (InvalidURL)\nwebhook: ok 200 ok\n"
    assert WEBHOOK_PASSWORD not in caplog.text


class Unforeseen:
    """A channel that breaks in a way its own code does not turn into a refusal."""

    name = "webhook"

    def send(self, body):
        raise RuntimeError(URL_WITH_PASSWORD)


def test_any_failure_of_a_send_is_a_channel_refusal_that_quotes_nothing_of_it(caplog):
    with pytest.raises(ChannelError) as refused:
        send_or_refuse(Unforeseen(), content.test_body(utcnow()))

    assert str(refused.value) == "could not be sent (RuntimeError)"
    assert WEBHOOK_PASSWORD not in caplog.text


@pytest.mark.parametrize("status", [200, 503])
def test_a_receivers_answer_reaches_the_terminal_and_the_deliveries_without_escapes_or_secrets(
    make_app, hook, status
):
    # What comes back is the receiver's (or whoever answers for its URL): an escape
    # sequence retitled and cleared the operator's terminal, and a token it echoed was
    # printed as it came while the stored answer had it scrubbed.
    hook.status = status
    hook.answer = b"\x1b]0;owned\x07\x1b[2J\xc2\x9b31m taken token=sk_live_ECHOED_0123456789abcdef"
    app = make_app(ALERT_WEBHOOK_URL=hook.url)

    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    said = tested.output
    assert said.startswith("webhook: ") and said.count("\n") == 1
    assert "taken token=" in said
    for unwanted in ("\x1b", "\x07", "\x9b", "sk_live_ECHOED"):
        assert unwanted not in said


@pytest.mark.parametrize(
    "to", ["oncall@example.test; lead@example.test", "oncall@example.test lead@example.test"]
)
def test_a_recipient_list_that_does_not_read_as_addresses_is_the_email_channels_refusal(
    make_app, to
):
    # The mail header's parser kept the first address and dropped the rest: "ok, accepted
    # for 1 recipients", and the lead never had an alert.
    smtp = SmtpReceiver()
    try:
        app = make_app(
            ALERT_EMAIL_TO=f"ops@example.test, {to}",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=smtp.port,
            SMTP_SECURITY="none",
        )
        tested = app.test_cli_runner().invoke(args=["alerts", "test"])
    finally:
        smtp.close()

    assert smtp.handler.messages == []
    assert tested.exit_code == 1
    assert tested.output == (
        f"email: FAILED ALERT_EMAIL_TO: {to!r} is not an address (addresses are separated by"
        " commas)\n"
    )


def test_a_sender_that_does_not_read_as_one_address_is_the_email_channels_refusal(make_app):
    # "Taskledger alerts" was sent from the envelope address "Taskledger" (the header
    # parser's first word), whose bounces and replies go nowhere.
    smtp = SmtpReceiver()
    try:
        app = make_app(
            ALERT_EMAIL_TO="ops@example.test",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=smtp.port,
            SMTP_SECURITY="none",
            SMTP_FROM="Taskledger alerts",
        )
        tested = app.test_cli_runner().invoke(args=["alerts", "test"])
    finally:
        smtp.close()

    assert smtp.handler.messages == []
    assert tested.output == "email: FAILED SMTP_FROM: 'Taskledger alerts' is not an address\n"


def test_recipients_without_an_smtp_host_are_the_email_channels_refusal(make_app, hook):
    # The email channel was left out unsaid: the test printed the webhook's "ok" alone and
    # on-call, named in ALERT_EMAIL_TO, never had an alert.
    app = make_app(ALERT_WEBHOOK_URL=hook.url, ALERT_EMAIL_TO="oncall@example.test")
    tested = app.test_cli_runner().invoke(args=["alerts", "test"])

    assert tested.exit_code == 1
    assert tested.output == (
        "webhook: ok 200 ok\nemail: FAILED SMTP_HOST: not set, and ALERT_EMAIL_TO names"
        " recipients\n"
    )
