"""One channel's trouble is that channel's alone: a channel whose settings cannot be used
refuses its own sends while the others deliver, and every way a send can fail is the
channel's one-line refusal, naming neither the receiver's URL nor a secret."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from extensions import db
from taskrunner import runner
from taskrunner.models import EventDelivery
from tests.alert_receivers import HttpReceiver, drain

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
