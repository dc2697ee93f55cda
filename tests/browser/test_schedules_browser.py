"""The schedules pages in a real Chromium against the served app and a real consumer: a
schedule whose scheduler stopped shows its missed slots and the navigation's badge (one
row of navigation at 1280 px with the longest email), a slot links to its run, and an
operator pauses a schedule through its confirmation page. Both pages are audited with
axe-core and saved as screenshots (desktop and phone)."""

from __future__ import annotations

from datetime import timedelta

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import run_status
from tests.browser.test_console_browser import shoot
from tests.browser.test_first_contact_browser import EMAIL, NAV_ROWS, PASSWORD, sign_in
from tests.support import wait_for

pytestmark = base.pytestmark
chromium = base.chromium
served = base.served

SWEEP = "taskrunner.detect_stuck"
STATEMENTS = "payments.monthly_statements"


def schedules_with_history(app) -> str:
    """The sweep's scheduler stopped three hours ago; the statements' slot started a run."""
    with app.app_context():
        create_user(EMAIL, PASSWORD, PERMISSIONS)
        now = utcnow().replace(microsecond=0)
        start = (now - timedelta(hours=3)).replace(minute=0, second=0)
        ledger.schedules.register([SWEEP, STATEMENTS], now=start)
        for k in range(6):
            slot = start + timedelta(minutes=5 * k)
            ledger.schedules.claim(SWEEP, slot, "worker-1:4242", now=slot)
            ledger.schedules.finish(SWEEP, slot, None, None, now=slot + timedelta(seconds=2))
        slot = now - timedelta(minutes=2)
        run_uuid = runner.start("diagnostics.probe", {"units": 4}, "schedule").uuid
        ledger.schedules.claim(STATEMENTS, slot, "worker-1:4242", now=slot)
        ledger.schedules.finish(STATEMENTS, slot, None, run_uuid)
        db.session.remove()
    return run_uuid


def test_an_operator_sees_a_stopped_schedule_and_pauses_it(app, consumers, served, chromium):
    consumers.start("tasks", workers=1)
    run_uuid = schedules_with_history(app)
    wait_for(lambda: run_status(app, run_uuid) != "running", timeout=60, message="the run")

    page = chromium.new_page(viewport=base.DESKTOP)
    sign_in(page, served, "/backoffice/schedules")
    page.wait_for_selector("table.schedules")
    badge = page.locator("nav.nav a[href='/backoffice/schedules'] .badge")
    assert badge.inner_text().startswith("1")
    assert page.evaluate(NAV_ROWS) == 1, "the navigation wraps"
    sweep = page.locator("table.schedules tbody tr", has=page.locator("th", has_text=SWEEP))
    assert "missed · 24 h" in sweep.inner_text()
    statements = page.locator(
        "table.schedules tbody tr", has=page.locator("th", has_text=STATEMENTS)
    )
    assert statements.locator(f"a[href='/backoffice/task-runs/{run_uuid}']").count() == 1
    shoot(chromium, page, "schedules", f"{served}/backoffice/schedules")

    page.goto(f"{served}/backoffice/schedules/{SWEEP}")
    page.click(f"form[action='/backoffice/schedules/{SWEEP}/pause'] button")
    assert "never missed" in page.inner_text("main")
    page.click("button[name=confirmed]")
    page.wait_for_selector(f"text={SWEEP} paused.")
    assert "pause by " + EMAIL in page.inner_text("main")
    shoot(chromium, page, "schedule", f"{served}/backoffice/schedules/{SWEEP}")
