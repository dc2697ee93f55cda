"""Triage in a real Chromium against the served app and real consumers (issue 24): tonight's
probe run crashes, meets vendor errors and refusals; the run page links to the comparison
with last night's run, the error groups tell the crash apart and name its line, the unit
page opens its stack. Each page is audited with axe-core at desktop and phone width, and
its screenshots are saved to docs/screenshots/."""

from __future__ import annotations

import re

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from taskrunner import runner
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import (
    DESKTOP,
    PASSWORD,
    PHONE,
    SHOTS,
    audit,
    phone_layout,
    run_status,
    shoot,
)
from tests.support import wait_for

pytestmark = base.pytestmark
chromium = base.chromium
served = base.served


def finished(app, context: dict) -> str:
    with app.app_context():
        run_uuid = runner.start("diagnostics.probe", context, "schedule").uuid
    wait_for(lambda: run_status(app, run_uuid) != "running", timeout=90, message="the run")
    return run_uuid


def test_an_operator_compares_tonight_with_last_night_and_finds_the_crash(
    app, consumers, served, chromium
):
    consumers.start("tasks", workers=2)
    with app.app_context():
        create_user("oncall@example.com", PASSWORD, PERMISSIONS)
    finished(app, {"units": 30, "fail_every": 5})
    tonight = finished(
        app, {"units": 30, "fail_every": 10, "vendor_fail_every": 7, "crash_every": 3}
    )

    page = chromium.new_page(viewport=DESKTOP)
    page.goto(f"{served}/backoffice/task-runs/{tonight}")
    page.fill("input[name=email]", "oncall@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    phone = chromium.new_page(viewport=PHONE, is_mobile=True)
    phone.context.add_cookies(page.context.cookies())

    link = page.locator("a.compare-link")
    assert re.fullmatch(r"vs the previous run: \d+ newly failing, \d+ recovered", link.inner_text())
    link.click()
    page.wait_for_selector("#newly-failing")
    assert page.locator("#newly-failing td.key a").count() > 0
    assert page.locator("#recovered td.key a").count() > 0
    assert page.locator("#still-failing td[data-label='Runs in a row']").count() > 0
    shoot(page, phone, page.url, "compare", "#still-failing")

    errors = f"{served}/backoffice/task-runs/{tonight}/errors"
    page.goto(errors)
    crash = page.locator("table.groups tbody tr", has=page.locator(".kind-crash"))
    assert crash.count() == 1
    assert re.search(r"in diagnostics/probe\.py:\d+ in _read_settings", crash.inner_text())
    shoot(page, phone, errors, "crash-group", ".kind-crash")

    crash.locator("a.mono").first.click()
    page.wait_for_selector("details.stack")
    unit_url = page.url
    for view, suffix in ((page, ""), (phone, "-phone")):
        view.goto(unit_url)
        view.click("details.stack summary")
        view.wait_for_selector("ol.frames li.own")
        frames = view.locator("ol.frames li").all_inner_texts()
        assert frames[-1].startswith("diagnostics/probe.py:") and "_read_settings" in frames[-1]
        assert "sk_live" not in view.content()
        audit(view, f"crash-stack{suffix}")
        view.screenshot(path=str(SHOTS / f"crash-stack{suffix}.png"), full_page=True)
    phone_layout(phone, "crash-stack-phone")
