"""The on-call console in a real Chromium against the served app and real consumers: find a
tenant by name from the navigation box, see a worker run a unit, retry only one error group,
pause a type and resume it. Audits each console page with axe-core and saves its
screenshots (desktop and phone)."""

from __future__ import annotations

from datetime import timedelta

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from database import utcnow
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.ledger.throughput import THROUGHPUT_GRACE
from tenancy import services as tenants
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import (
    PASSWORD,
    PHONE,
    SHOTS,
    audit,
    phone_layout,
    run_status,
)
from tests.support import wait_for

pytestmark = base.pytestmark
# The real Chromium and the served app, shared with the backoffice's browser test.
chromium = base.chromium
served = base.served

BEAT = {"CONSUMER_HEARTBEAT_SECONDS": "0.5"}


def shoot(browser, page, name: str, path: str) -> None:
    """Both widths of one page, each audited with axe-core (serious or critical fails); the
    phone's layout checked too."""
    audit(page, name)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    phone = browser.new_page(viewport=PHONE, is_mobile=True)
    phone.context.add_cookies(page.context.cookies())
    phone.goto(path)
    audit(phone, f"{name}-phone")
    phone.screenshot(path=str(SHOTS / f"{name}-phone.png"), full_page=True)
    phone_layout(phone, f"{name}-phone")
    phone.close()


def test_an_operator_on_call_uses_workers_queues_search_and_a_group_retry(
    app, consumers, served, chromium
):
    app.config["CONSUMER_HEARTBEAT_SECONDS"] = 0.5
    consumers.start("tasks", workers=2, **BEAT)
    with app.app_context():
        create_user("oncall@example.com", PASSWORD, PERMISSIONS)
        tenants.create("Acme Corporation")
        tenants.create("Globex")
        # 5, 10, 15: domain refusals; 7, 14: vendor errors.
        failing = runner.start(
            "diagnostics.probe", {"units": 16, "fail_every": 5, "vendor_fail_every": 7}, "cli"
        ).uuid
    wait_for(lambda: run_status(app, failing) != "running", timeout=60, message="the run")

    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{served}/backoffice/workers")
    page.fill("input[name=email]", "oncall@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")

    # A worker busy with a slow unit, seen live on the workers page.
    with app.app_context():
        slow = runner.start("diagnostics.probe", {"units": 1, "sleep_ms": 6000}, "cli").uuid
    page.wait_for_selector(".consumer-live")
    for _ in range(40):
        page.reload()
        if page.locator(f"a[href='/backoffice/task-runs/{slow}']").count():
            break
        page.wait_for_timeout(250)
    assert "probe-1" in page.inner_text(".consumer-live table")
    shoot(chromium, page, "workers", f"{served}/backoffice/workers")

    # Find the tenant by name from the box in the navigation.
    page.fill("#nav-q", "acme")
    page.press("#nav-q", "Enter")
    page.wait_for_selector("text=Acme Corporation")
    assert "Globex" not in page.inner_text("main")
    shoot(chromium, page, "search", f"{served}/backoffice/search?q=acme")

    # Retry only the domain refusals' group from the error groups page.
    page.goto(f"{served}/backoffice/task-runs/{failing}/errors")
    assert "Vendor error" in page.inner_text("table.groups")
    row = page.locator("tr", has_text="probe unit # failed")
    row.locator("button[name=retry-group]").click()
    assert page.inner_text(".confirm-count").startswith("3")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=Retrying 3 units.")
    wait_for(lambda: run_status(app, failing) != "running", timeout=60, message="the retry")
    with app.app_context():
        run = ledger.runs.get_run(failing)
        failed = ledger.runs.run_units_page(run, status="failed").items
        assert {u["unit_key"]: u["attempts"] for u in failed} == {
            "probe-5": 2,
            "probe-10": 2,
            "probe-15": 2,
            "probe-7": 1,
            "probe-14": 1,
        }

    # Pause the type: a new run's units wait; resume: it finishes.
    page.goto(f"{served}/backoffice/queues")
    page.click("form[action='/backoffice/task-types/diagnostics.probe/pause'] button")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=diagnostics.probe paused.")
    with app.app_context():
        waiting = runner.start("diagnostics.probe", {"units": 5}, "cli").uuid
    page.goto(f"{served}/backoffice/task-runs/{waiting}")
    assert "is paused" in page.inner_text("main")
    # The periodic per-minute roll-up, run here rather than waited for: the minute now
    # running included (past its grace), so the page shows the counts of the runs above.
    with app.app_context():
        assert ledger.throughput.roll(utcnow() + timedelta(minutes=1) + THROUGHPUT_GRACE) > 0
    page.goto(f"{served}/backoffice/queues")
    assert "not rolled up yet" not in page.inner_text("main")
    tasks = page.locator("table.queues tbody tr", has=page.locator("th", has_text="tasks"))
    assert tasks.locator("td[data-label='Done / failed, hour']").inner_text() != "0 / 0"
    shoot(chromium, page, "queues", f"{served}/backoffice/queues")
    assert run_status(app, waiting) == "running"
    page.click("form[action='/backoffice/task-types/diagnostics.probe/resume'] button")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=5 waiting units dispatched")
    wait_for(lambda: run_status(app, waiting) == "completed", timeout=60, message="resumed run")
