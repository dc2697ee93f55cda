"""The Alerts page in a real Chromium against the served app: an open and a resolved
episode with their deliveries, "Mute for 1 h…" confirmed; the navigation still one row at
1280 px. Audited with axe-core; screenshots (desktop and phone) into docs/screenshots/."""

from __future__ import annotations

import pytest

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from taskrunner import runner
from tests.alert_receivers import HttpReceiver, drain
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import DESKTOP, PASSWORD, SHOTS, audit
from tests.browser.test_console_browser import shoot
from tests.browser.test_first_contact_browser import NAV_ROWS
from tests.factories import ControlledTask

pytestmark = base.pytestmark
chromium = base.chromium
served = base.served


@pytest.fixture
def hook():
    server = HttpReceiver()
    yield server
    server.close()


def test_an_operator_reads_the_alerts_and_mutes_a_rule(app, make_app, hook, served, chromium):
    task = ControlledTask()
    make_app.register(task)
    app.config.update(ALERT_WEBHOOK_URL=hook.url, BACKOFFICE_URL=served)
    with app.app_context():
        create_user("oncall@example.com", PASSWORD, PERMISSIONS)
        for failing in ({"k1"}, set(), {"k1", "k2", "k3"}):
            task.failing = failing
            runner.start(task.type(), {"units": 4}, "cli")
            drain("tasks", "default")
    assert [r.json["kind"] for r in hook.received] == ["opened", "resolved", "opened"]

    page = chromium.new_page(viewport=DESKTOP)
    page.goto(f"{served}/backoffice/alerts")
    page.fill("input[name=email]", "oncall@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#open-h")
    assert "tests.controlled completed with failures: 3 failed units" in page.inner_text("main")
    assert page.evaluate(NAV_ROWS) == 1, "the navigation wraps"
    shoot(chromium, page, "alerts", f"{served}/backoffice/alerts")

    page.locator("form[action$='/rules/run_failed/mute'] button").click()
    page.wait_for_selector("#confirm")
    audit(page, "alerts-mute-confirm")
    page.click("#confirm button[type=submit]")
    page.wait_for_selector("#open-h")
    assert "run_failed muted until" in page.inner_text("main")
    page.screenshot(path=str(SHOTS / "alerts-muted.png"), full_page=True)
    page.close()
