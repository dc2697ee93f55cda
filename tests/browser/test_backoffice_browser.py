"""A real Chromium against the served app and real consumers: sign in, open a run with
failures, retry its failed units, watch the run finish. Saves the README screenshots."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from demo.seed import finished_sweep, seed_tenants
from taskrunner import runner
from taskrunner.ledger import ledger
from tests.conftest import IN_CI
from tests.support import wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parent.parent.parent / "docs" / "screenshots"
PASSWORD = "browser test password"

pytestmark = [pytest.mark.browser, pytest.mark.workers]


@pytest.fixture
def chromium():
    if not os.path.exists(CHROMIUM):
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if IN_CI:
            pytest.fail(reason + " (CI=true: the browser test is required)")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def served(app):
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def run_status(app, run_uuid: str) -> str:
    with app.app_context():
        status = ledger.get_run(run_uuid).status
        ledger.session.remove()
        return status


def test_an_operator_retries_failed_units_and_sees_the_run_finish(app, consumers, served, chromium):
    consumers.start("tasks", workers=2)
    with app.app_context():
        create_user("operator@example.com", PASSWORD, PERMISSIONS)
        seed_tenants()
        finished_sweep("2026-09")
        finished_sweep("2026-10")
        cancelled = runner.start("diagnostics.probe", {"units": 20, "sleep_ms": 2000}, "cli")
        runner.cancel(cancelled.uuid)
        run_uuid = runner.start(
            "diagnostics.probe", {"units": 24, "fail_every": 5, "vendor_fail_every": 7}, "cli"
        ).uuid
    wait_for(
        lambda: run_status(app, run_uuid) != "running",
        timeout=60,
        message="the probe run to finish on the consumers",
    )
    assert run_status(app, run_uuid) == "completed_with_failures"

    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{served}/backoffice/task-runs")
    assert "/login" in page.url
    page.fill("input[name=email]", "operator@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("table.runs")
    page.screenshot(path=str(SHOTS / "run-list.png"), full_page=True)

    page.click(f"a[href='/backoffice/task-runs/{run_uuid}']")
    page.wait_for_selector("text=Failed units")
    page.screenshot(path=str(SHOTS / "run-detail.png"), full_page=True)

    page.click("text=grouped by reason →")
    page.wait_for_selector("table.groups")
    page.screenshot(path=str(SHOTS / "error-groups.png"), full_page=True)
    page.go_back()

    # 5, 10, 15, 20 fail as domain errors; 7, 14, 21 as vendor errors.
    page.click("button[name=retry-failed]")
    assert "7 units" in page.inner_text(".confirm-count")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=Retrying 7 units.")
    # The page refreshes itself while the run runs; the run ends by itself again.
    page.wait_for_selector(".head .pill-completed-with-failures", timeout=60_000)
    assert run_status(app, run_uuid) == "completed_with_failures"
    with app.app_context():
        run = ledger.get_run(run_uuid)
        failed = ledger.run_units_page(run, status="failed").items
        assert {u["unit_key"]: u["attempts"] for u in failed} == {
            f"probe-{i}": 2 for i in (5, 7, 10, 14, 15, 20, 21)
        }
        [action] = ledger.run_actions(run)
        assert (action.action, action.actor, action.source) == (
            "retry",
            "operator@example.com",
            "web",
        )

    phone = chromium.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone.context.add_cookies(page.context.cookies())
    phone.goto(f"{served}/backoffice/task-runs/{run_uuid}")
    phone.screenshot(path=str(SHOTS / "run-detail-phone.png"), full_page=True)
