"""A real Chromium against the served app and real consumers, on the on-call path: sign in,
see what needs attention, find the failed group, retry the failed units, watch the run
finish live (no reload, focus kept, pausable), retry a failed course build. Every page is
audited with axe-core (from the npm registry, ``npm ci``) and fails the test on a serious
or critical violation. Saves the screenshots of docs/screenshots/ at desktop and phone
width."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from werkzeug.serving import make_server

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from coursebuilder import stages
from coursebuilder.models import GenerationStep
from coursebuilder.stages import find_run
from database import write_transaction
from demo.seed import finished_sweep, seed_tenants
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from tenancy.models import Tenant
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
ROOT = Path(__file__).resolve().parent.parent.parent
SHOTS = ROOT / "docs" / "screenshots"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
PASSWORD = "browser test password"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
BLOCKING = ("serious", "critical")

pytestmark = [pytest.mark.browser, pytest.mark.workers]


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason + " (CI=true: the browser test is required)")
    pytest.skip(reason)


@pytest.fixture
def chromium():
    if not os.path.exists(CHROMIUM):
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    if not AXE.exists():
        _missing(f"{AXE} is missing (npm ci, run by make install)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def served(app):
    # Streams as in production: long enough that the page follows one, short polls.
    app.config.update(LIVE_STREAM_SECONDS=30, LIVE_POLL_SECONDS=0.3, BUILDER_STREAM_SECONDS=30)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def run_status(app, run_uuid: str) -> str:
    with app.app_context():
        status = ledger.runs.get_run(run_uuid).status
        ledger.session.remove()
        return status


def audit(page, name: str) -> None:
    """axe-core on the page as it is; serious or critical violations fail the test.

    The engine is evaluated through the DevTools protocol, which the page's CSP does not
    govern, so the page under test keeps its real policy.
    """
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    violations = page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
        }"""
    )
    blocking = [v for v in violations if v["impact"] in BLOCKING]
    assert not blocking, f"{name}: " + json.dumps(blocking, indent=1)


# What reads badly on a phone, measured rather than eyeballed: the page or a table in its frame
# scrolling sideways, and a card's label (its ::before) running into the value after it. Only
# the course builder's stage and step tables keep a sideways scroll (by design, for now).
SCROLLING_TABLES = "table.stages, table.steps"
LAYOUT_PROBLEMS = """(scrolling) => {
    const problems = [];
    const doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth + 1) {
        problems.push(`the page scrolls sideways: ${doc.scrollWidth} > ${doc.clientWidth} px`);
    }
    for (const wrap of document.querySelectorAll(".table-wrap")) {
        if (wrap.querySelector(scrolling)) continue;
        if (wrap.scrollWidth > wrap.clientWidth + 1) {
            const table = wrap.querySelector("table").className.replace(/ /g, ".");
            problems.push(`table.${table} scrolls sideways: ${wrap.scrollWidth}`
                + ` > ${wrap.clientWidth} px`);
        }
    }
    const measure = document.createElement("canvas").getContext("2d");
    for (const td of document.querySelectorAll("td[data-label]")) {
        if (!td.getClientRects().length) continue;  // hidden at this width
        const label = getComputedStyle(td, "::before");
        if (label.content === "none" || label.display === "none" || label.display === "block") {
            continue;  // no label drawn, or drawn on a line of its own
        }
        const cell = getComputedStyle(td);
        const name = `${td.closest("table").className} "${td.dataset.label}"`;
        if (!["left", "start"].includes(cell.textAlign)) {
            problems.push(`${name}: the cell is aligned ${cell.textAlign}, away from its label`);
            continue;
        }
        const range = document.createRange();
        range.selectNodeContents(td);
        const first = [...range.getClientRects()].find(r => r.width > 0);
        if (!first) continue;
        measure.font = label.font;
        const box = td.getBoundingClientRect();
        const px = name => parseFloat(cell[name]);
        const contentLeft = box.left + px("borderLeftWidth") + px("paddingLeft");
        const contentTop = box.top + px("borderTopWidth") + px("paddingTop");
        const labelEnd = contentLeft + parseFloat(label.paddingLeft)
            + measure.measureText(td.dataset.label).width;
        const sameLine = first.top < contentTop + parseFloat(label.fontSize);
        if (sameLine && first.left - labelEnd < 4) {
            problems.push(`${name}: the value starts ${(first.left - labelEnd).toFixed(1)} px`
                + " after its label");
        }
    }
    return [...new Set(problems)];
}"""


def phone_layout(page, name: str) -> None:
    """Nothing scrolls sideways and no card label touches its value."""
    problems = page.evaluate(LAYOUT_PROBLEMS, SCROLLING_TABLES)
    assert not problems, f"{name}: " + "; ".join(problems)


def shoot(page, phone, url: str, name: str, ready: str) -> None:
    """Both widths of one page, audited at both; the phone's layout checked too."""
    for view, suffix in ((page, ""), (phone, "-phone")):
        view.goto(url)
        view.wait_for_selector(ready)
        audit(view, f"{name}{suffix}")
        view.screenshot(path=str(SHOTS / f"{name}{suffix}.png"), full_page=True)
    phone_layout(phone, f"{name}-phone")


def failed_build(app) -> str:
    """A build whose first stage failed (no builder consumer runs here: failed by hand)."""
    with app.app_context():
        tenant = db.session.execute(select(func.min(Tenant.id))).scalar_one()
        run_uuid = stages.start(
            tenant, "Tides and currents", lessons=2, quizzes=0, concurrency=1, initiator="cli"
        )
        # Consumers write to the same SQLite file meanwhile: a transaction that read before
        # it writes must hold the write lock from its first statement.
        with write_transaction(db.session):
            step = db.session.execute(
                select(GenerationStep).where(
                    GenerationStep.run_id == find_run(run_uuid).id,
                    GenerationStep.key == "outline-1",
                )
            ).scalar_one()
            step.status = "running"
        stages.fail_run(step.run_id, step.id, "step outline/outline-1 failed: quota exceeded")
        db.session.remove()
    return run_uuid


def test_an_operator_on_call_finds_what_failed_retries_it_and_watches_it_finish_live(
    app, consumers, served, chromium
):
    consumers.start("tasks", workers=2)
    with app.app_context():
        create_user("operator@example.com", PASSWORD, PERMISSIONS)
        seed_tenants()
        finished_sweep("2026-09")
        finished_sweep("2026-10")
        cancelled = runner.start("diagnostics.probe", {"units": 20, "sleep_ms": 2000}, "cli")
        runner.cancel(cancelled.uuid)
        run_uuid = runner.start(
            "diagnostics.probe",
            {"units": 24, "fail_every": 5, "vendor_fail_every": 7, "sleep_ms": 600},
            "cli",
        ).uuid
    build_uuid = failed_build(app)
    wait_for(
        lambda: run_status(app, run_uuid) != "running",
        timeout=90,
        message="the probe run to finish on the consumers",
    )
    assert run_status(app, run_uuid) == "completed_with_failures"

    page = chromium.new_page(viewport=DESKTOP)
    page.goto(f"{served}/backoffice/task-runs")
    assert "/login" in page.url
    audit(page, "sign-in")
    page.fill("input[name=email]", "operator@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("table.runs")
    phone = chromium.new_page(viewport=PHONE, is_mobile=True)
    phone.context.add_cookies(page.context.cookies())

    # What needs attention: the badge says which runs failed today, the strip how many units.
    assert page.inner_text("a.badge-failed") == "3 failed · 24 h"
    assert "failed" in page.inner_text("section.overview figcaption")
    shoot(page, phone, f"{served}/backoffice/task-runs", "run-list", "table.runs")
    shoot(page, phone, f"{served}/backoffice/overview", "overview", "section.overview svg")
    # The skip link is the first stop of the keyboard and lands on the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"

    page.goto(f"{served}/backoffice/task-runs")
    page.click(f"a[href='/backoffice/task-runs/{run_uuid}']")
    page.wait_for_selector("text=Failed units")
    shoot(page, phone, page.url, "run-detail", "text=Failed units")
    shoot(page, phone, f"{served}/backoffice/task-runs/{cancelled.uuid}", "run-cancelled", "h1")
    shoot(page, phone, f"{served}/backoffice/task-runs/{run_uuid}/events", "events", "table")

    # Find the failed groups: the domain refusals and the vendor errors apart.
    page.goto(f"{served}/backoffice/task-runs/{run_uuid}")
    page.click("text=grouped by reason →")
    page.wait_for_selector("table.groups")
    groups = page.locator("table.groups tbody tr").count()
    assert groups == 2
    shoot(page, phone, page.url, "error-groups", "table.groups")

    # 5, 10, 15, 20 fail as domain errors; 7, 14, 21 as vendor errors.
    page.goto(f"{served}/backoffice/task-runs/{run_uuid}")
    page.click("button[name=retry-failed]")
    assert "7 units" in page.inner_text(".confirm-count")
    audit(page, "confirm")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=Retrying 7 units.")

    # Live: no reload (a mark on the window survives), focus stays on its link, pausable.
    page.wait_for_selector(".live-bar:not([hidden])")
    page.evaluate("window.__sameDocument = true")
    page.focus(f"a.aside[href='/backoffice/task-runs/{run_uuid}/errors']")
    page.click("[data-live-toggle]")
    assert page.get_attribute("[data-live-toggle]", "aria-pressed") == "true"
    assert page.inner_text(".live-state") == "Live updates paused"
    page.wait_for_timeout(1500)
    assert page.locator(".head .pill-running").count() == 1  # paused: nothing moves
    page.click("[data-live-toggle]")
    assert page.get_attribute("[data-live-toggle]", "aria-pressed") == "false"
    page.focus(f"a.aside[href='/backoffice/task-runs/{run_uuid}/errors']")
    page.wait_for_selector(".head .pill-completed-with-failures", timeout=90_000)
    page.wait_for_selector("text=Run finished: completed with failures")
    assert page.evaluate("window.__sameDocument === true")
    assert page.evaluate("document.activeElement.getAttribute('href')") == (
        f"/backoffice/task-runs/{run_uuid}/errors"
    )
    audit(page, "run-detail-finished")
    assert run_status(app, run_uuid) == "completed_with_failures"
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        failed = ledger.runs.run_units_page(run, status="failed").items
        assert {u["unit_key"]: u["attempts"] for u in failed} == {
            f"probe-{i}": 2 for i in (5, 7, 10, 14, 15, 20, 21)
        }
        [action] = ledger.runs.run_actions(run)
        assert (action.action, action.actor, action.source) == (
            "retry",
            "operator@example.com",
            "web",
        )

    # The run list marks the run as retried.
    page.goto(f"{served}/backoffice/task-runs")
    assert page.locator(f"#run-{run_uuid} .tag-retried").count() == 1

    # The other operator pages pass the same audit.
    for path in (
        f"/backoffice/task-runs/{run_uuid}/units/probe-7",
        "/backoffice/stale-units",
        "/backoffice/units?key=probe-7",
        "/backoffice/parked-events",
        "/builder/runs",
    ):
        page.goto(served + path)
        audit(page, path)

    # A failed course build: its steps say failed and skipped; it is retried from its stage.
    page.goto(f"{served}/builder/runs/{build_uuid}")
    assert page.inner_text("table.steps tbody").count("skipped") == 1
    shoot(page, phone, page.url, "build-failed", "table.steps")
    page.goto(f"{served}/builder/runs/{build_uuid}")
    page.click("button[name=retry-build]")
    page.click("button[name=confirmed]")
    page.wait_for_selector("text=Retrying stage outline: 2 steps queued again.")
    audit(page, "build-retried")
