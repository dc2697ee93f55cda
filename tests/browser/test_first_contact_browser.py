"""An operator's first contact and habits, in a real Chromium against the served app: the
front door, the favicon (no console error on any page), sign-in and back after a session
ended under a form, focus where the next keystroke belongs, the "/" shortcut, dark mode
with AA contrast (axe in both schemes), one row of navigation at 1280 px, and pages fed
unbreakable tenant names and unit keys and 5,000-character reasons that never widen past
the viewport at 1280 and 390 px. Saves the screenshots of the new states."""

from __future__ import annotations

import json

from sqlalchemy import select, update

from accounts.permissions import PERMISSIONS
from accounts.services import create_user, set_password
from coursebuilder import stages as builder
from coursebuilder.models import GenerationRun, GenerationStep
from database import write_transaction
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from taskrunner.ledger.reason_fold import stored_reason
from taskrunner.models import TaskRunUnit
from tenancy import services as tenants
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import (
    DESKTOP,
    LAYOUT_PROBLEMS,
    PASSWORD,
    PHONE,
    SCROLLING_TABLES,
    SHOTS,
    audit,
)

pytestmark = base.pytestmark
chromium = base.chromium
served = base.served

EMAIL = "first.lastname@operations.example.com"
LONG_NAME = "Globex" + "Y" * 185  # the longest tenant name, no space to break at
LONG_KEY = "tenant-" + "k" * 184  # the longest unit key, likewise
LONG_REASON = ("vendor said: " + "x" * 60 + " ") * 70 + "z" * 3000
LONG_TITLE = "Oceanography" + "W" * 179


def focused(page, attribute: str, expected: str) -> None:
    """The focused element's ``attribute`` is ``expected`` within 5 s: autofocus is applied
    at the browser's next rendering step, after the element a test waited for exists."""
    page.wait_for_function(
        f"() => document.activeElement.{attribute} === {json.dumps(expected)}", timeout=5000
    )


# The navigation's links, its search box and the sign-out form: their rows at this width,
# once the page's stylesheet and fonts are in (a busy server can serve the CSS after the
# element a test waited for: unstyled, the links stack in rows of their own).
NAV_ROWS = """async () => {
    if (document.readyState !== "complete") {
        await new Promise(done => addEventListener("load", done, {once: true}));
    }
    await document.fonts.ready;
    const visible = [...document.querySelectorAll(".topbar > *, .nav > *")]
        .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden");
    return new Set(visible.map(e => {
        const box = e.getBoundingClientRect();
        return Math.round(box.top + box.height / 2);
    })).size;
}"""


def _console(page, errors: list[str]) -> None:
    """Collect what the page reports as errors (a missing favicon, a script, the CSP)."""
    page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else 0)
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))


def sign_in(page, served_url: str, path: str, email: str = EMAIL) -> None:
    page.goto(served_url + path)
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")


def long_values(app) -> dict[str, str]:
    """A failed run and a failed course build fed the longest values a page may meet."""
    with app.app_context():
        tenant = tenants.create(LONG_NAME).id
        tenants.create("Acme")
        keys = [LONG_KEY, "tenant-2", "tenant-3"]
        dispatch = ledger.transitions.create_run(
            "diagnostics.probe", {"units": 3}, "cli", [TaskUnit(k, tenant) for k in keys], 1000
        )
        for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, len(keys) + 1):
            claim = ledger.transitions.claim(unit_id, dispatch.token)
            if claim.unit.key == "tenant-3":
                ledger.transitions.complete(claim)
            else:
                ledger.transitions.fail(claim, "vendor refused the statement")
        ledger.transitions.finalize(dispatch.run_id)
        # Stored reasons are cut to 500 characters; a page still meets longer ones (rows
        # written before that rule, or by a deployment's own code).
        with write_transaction(db.session):
            db.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.task_run_id == dispatch.run_id, TaskRunUnit.status == "failed")
                .values(**stored_reason(LONG_REASON))
            )
        build = builder.start(tenant, LONG_TITLE, lessons=1, quizzes=0, concurrency=1)
        run_id = builder.find_run(build).id
        with write_transaction(db.session):
            step = db.session.execute(
                select(GenerationStep).where(GenerationStep.run_id == run_id).limit(1)
            ).scalar_one()
            step.status = "running"
        builder.fail_run(run_id, step.id, "step failed")
        with write_transaction(db.session):
            db.session.execute(
                update(GenerationRun)
                .where(GenerationRun.id == run_id)
                .values(failure_reason=LONG_REASON)
            )
            db.session.execute(
                update(GenerationStep).where(GenerationStep.id == step.id).values(error=LONG_REASON)
            )
        db.session.remove()
    return {"run": dispatch.run_uuid, "build": build, "tenant": str(tenant)}


def test_long_values_never_widen_a_page_and_both_schemes_pass_the_audit(app, served, chromium):
    with app.app_context():
        create_user(EMAIL, PASSWORD, PERMISSIONS)
    ids = long_values(app)
    run, build, tenant = ids["run"], ids["build"], ids["tenant"]
    pages = {
        "run-list": "/backoffice/task-runs",
        "run-detail": f"/backoffice/task-runs/{run}",
        "unit": f"/backoffice/task-runs/{run}/units/{LONG_KEY}",
        "errors": f"/backoffice/task-runs/{run}/errors",
        "events": f"/backoffice/task-runs/{run}/events",
        "history": f"/backoffice/units?tenant={tenant}",
        "search": "/backoffice/search?q=globex",
        "builds": "/builder/runs",
        "build": f"/builder/runs/{build}",
        "stale": "/backoffice/stale-units",
        "workers": "/backoffice/workers",
        "queues": "/backoffice/queues",
    }
    shots = {"run-detail", "unit", "build"}
    errors: list[str] = []
    for scheme in ("light", "dark"):
        views = {}
        for name, size, extra in (("", DESKTOP, {}), ("-phone", PHONE, {"is_mobile": True})):
            view = chromium.new_page(viewport=size, color_scheme=scheme, **extra)
            _console(view, errors)
            views[name] = view
        sign_in(views[""], served, "/backoffice/task-runs")
        views[""].wait_for_selector("table.runs")
        views["-phone"].context.add_cookies(views[""].context.cookies())
        for name, path in pages.items():
            for suffix, view in views.items():
                label = f"{name}{suffix} ({scheme})"
                view.goto(served + path)
                view.wait_for_selector("main h1")
                audit(view, label)
                problems = view.evaluate(LAYOUT_PROBLEMS, SCROLLING_TABLES)
                assert not problems, f"{label}: " + "; ".join(problems)
                if scheme == "dark" and name in ("run-list", "run-detail", "build"):
                    view.screenshot(path=str(SHOTS / f"{name}-dark{suffix}.png"), full_page=True)
                if scheme == "light" and name in shots:
                    view.screenshot(path=str(SHOTS / f"{name}-long{suffix}.png"), full_page=True)
            # One row of navigation at 1280 px, the longest links and the email included.
            if scheme == "light":
                assert views[""].evaluate(NAV_ROWS) == 1, f"{name}: the navigation wraps"
        for view in views.values():
            view.close()

    # A long reason shows its first lines and a "Show all" that opens it, and back.
    page = chromium.new_page(viewport=PHONE, is_mobile=True)
    sign_in(page, served, f"/backoffice/task-runs/{run}")
    cell = page.locator("table.units td.error-text").first
    clamp = cell.locator(".clamp")
    shut = clamp.bounding_box()["height"]
    assert shut < 100, f"a clamped reason is {shut} px tall"
    button = cell.get_by_role("button", name="Show all")
    assert button.get_attribute("aria-expanded") == "false"
    button.click()
    assert clamp.bounding_box()["height"] > 5 * shut
    assert cell.get_by_role("button", name="Show less").get_attribute("aria-expanded") == "true"
    assert not page.evaluate(LAYOUT_PROBLEMS, SCROLLING_TABLES)
    page.screenshot(path=str(SHOTS / "reason-shown-all-phone.png"), full_page=True)
    cell.get_by_role("button", name="Show less").click()
    assert clamp.bounding_box()["height"] == shut
    # A short reason has no button: nothing is hidden.
    page.goto(f"{served}/backoffice/task-runs/{run}/units/tenant-3")
    assert page.locator(".show-all").count() == 0
    page.close()
    assert errors == []


def test_an_operator_is_led_from_the_front_door_and_kept_in_place(app, served, chromium):
    with app.app_context():
        create_user(EMAIL, PASSWORD, PERMISSIONS)
        create_user("builder@example.com", PASSWORD, ["course-builder.runs.view"])
        tenant = tenants.create("Acme").id
        run = ledger.transitions.create_run(
            "diagnostics.probe", {"units": 2}, "cli", [TaskUnit("a", tenant), TaskUnit("b")], 100
        ).run_uuid
        db.session.remove()
    errors: list[str] = []
    browser = chromium.new_context(viewport=DESKTOP)  # one cookie jar, several tabs
    page = browser.new_page()
    _console(page, errors)

    # The front door leads to sign-in, then to the run list; the favicon is there.
    page.goto(served + "/")
    assert page.url.startswith(f"{served}/login")
    focused(page, "name", "email")
    page.fill("input[name=email]", EMAIL)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("table.runs")
    assert page.url == f"{served}/backoffice/task-runs"
    page.goto(served + "/")
    assert page.url == f"{served}/backoffice/task-runs"
    assert page.request.get(served + "/favicon.ico").headers["content-type"].startswith("image/svg")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert page.request.get(served + icon).ok

    # "/" from anywhere but a text field goes to the search box; in the box it is a "/".
    page.locator("main h1").click()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "nav-q"
    page.keyboard.type("a/b")
    assert page.input_value("#nav-q") == "a/b"

    # A confirmation focuses its primary action; the message after the redirect takes focus.
    page.goto(f"{served}/backoffice/task-runs/{run}")
    page.click("button[name=cancel]")
    page.wait_for_selector(".confirm")
    focused(page, "name", "confirmed")
    page.keyboard.press("Enter")
    page.wait_for_selector(".flash")
    focused(page, "className", "flashes")
    assert "Run cancelled" in page.evaluate("document.activeElement.textContent")

    # A form posted after the session ended elsewhere (a password change): sign-in says so,
    # and signing in returns to the page the form was on, not to its action.
    with app.app_context():
        run = ledger.transitions.create_run(
            "diagnostics.probe", {}, "cli", [TaskUnit("c")], 100
        ).run_uuid
        db.session.remove()
    page.goto(f"{served}/backoffice/task-runs/{run}")
    with app.app_context():
        set_password(EMAIL, PASSWORD)
        db.session.remove()
    page.click("button[name=cancel]")
    page.wait_for_selector("text=Your session ended")
    assert page.url.startswith(f"{served}/login")
    focused(page, "className", "flashes")
    page.fill("input[name=email]", EMAIL)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1 .pill-running")
    assert page.url == f"{served}/backoffice/task-runs/{run}"

    # The same when the session was signed out in another tab (its CSRF secret went too).
    other = browser.new_page()
    other.goto(f"{served}/backoffice/task-runs")
    other.click(".signout button")
    other.wait_for_selector("text=Signed out.")
    page.click("button[name=cancel]")
    page.wait_for_selector("text=Your session ended")
    page.fill("input[name=email]", EMAIL)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1 .pill-running")
    assert page.url == f"{served}/backoffice/task-runs/{run}"
    other.close()

    # A builder-only operator's front door is the course builds.
    builder_page = chromium.new_page(viewport=DESKTOP)
    _console(builder_page, errors)
    sign_in(builder_page, served, "/", "builder@example.com")
    builder_page.wait_for_selector("main h1")
    assert builder_page.url == f"{served}/builder/runs"
    builder_page.goto(served + "/")
    assert builder_page.url == f"{served}/builder/runs"
    assert errors == []
