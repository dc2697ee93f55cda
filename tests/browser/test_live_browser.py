"""Live tells the truth (issue 24 item 7), in a real Chromium against a real gunicorn: the
live region says "Live" (with its marker) only while a stream is open; a stream ended by
the server on schedule is replaced without a word; a stream refused (one session's share
taken by another tab) and a server gone say "Reconnecting…" with the marker off, and
"Live" again once a stream opens; a session that ended says "Live updates stopped — sign
in again", with the way to sign in."""

from __future__ import annotations

import signal

import pytest

from accounts.permissions import PERMISSIONS
from accounts.services import create_user, set_password
from extensions import db
from harness import signal_group
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.browser import test_backoffice_browser as base
from tests.browser.test_backoffice_browser import DESKTOP, PASSWORD, SHOTS, audit
from tests.live_server import LiveServer
from tests.support import wait_for

pytestmark = base.pytestmark
chromium = base.chromium

EMAIL = "oncall@example.com"
# Short streams, so the page meets the server's scheduled ends; one stream per session.
SETTINGS = {"LIVE_STREAM_SECONDS": "2", "LIVE_POLL_SECONDS": "0.3", "LIVE_STREAMS_PER_SESSION": "1"}
SAID = """() => {
    const region = document.querySelector(".live-state");
    window.__said = [region.textContent];
    new MutationObserver(() => window.__said.push(region.textContent))
        .observe(region, {childList: true, characterData: true, subtree: true});
}"""
MARKER = "getComputedStyle(document.querySelector('.live-state'), '::before').content"


@pytest.fixture
def server(app, tmp_path):
    started = [LiveServer(app, tmp_path, **SETTINGS)]
    yield started
    for one in started:
        one.stop()


def state(page) -> tuple[str, str]:
    return page.get_attribute(".live-bar", "data-state"), page.inner_text(".live-state")


def live(page) -> bool:
    return state(page) == ("live", "Live")


def streams_asked(server: LiveServer, run: str) -> int:
    return server.log_path.read_text().count(f"GET /backoffice/task-runs/{run}/stream ")


def a_running_run(app) -> str:
    """The operator of these tests, and a running run of one unit: its uuid."""
    with app.app_context():
        create_user(EMAIL, PASSWORD, PERMISSIONS)
        run = ledger.transitions.create_run(
            "diagnostics.probe", {}, "cli", [TaskUnit("a")], 100
        ).run_uuid
        db.session.remove()
    return run


def signed_in_live(page, url: str) -> None:
    """Open ``url``, sign in on the way, and wait for the page's stream to open."""
    page.goto(url)
    page.fill("input[name=email]", EMAIL)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector(".live-bar[data-state=live]")


def test_the_live_region_says_when_updates_stopped_and_why(app, server, chromium, tmp_path):
    run = a_running_run(app)
    web = server[0]
    browser = chromium.new_context(viewport=DESKTOP)
    page = browser.new_page()
    run_page = f"{web.url}/backoffice/task-runs/{run}"
    signed_in_live(page, run_page)
    assert live(page) and page.evaluate(MARKER) == '"● "'
    page.evaluate(SAID)

    # The server ends each stream after 2 s: the page opens the next at once, silently.
    asked = streams_asked(web, run)
    wait_for(lambda: streams_asked(web, run) >= asked + 3, timeout=30, message="three rests")
    assert live(page)
    assert page.evaluate("window.__said.filter(text => text !== 'Live')") == []

    # Another tab of the same session takes its one stream: this one is refused (429).
    other = browser.new_page()
    other.goto(run_page)
    other.wait_for_selector(".live-bar[data-state=reconnecting]")
    assert other.inner_text(".live-state") == "Reconnecting…"
    assert other.evaluate(MARKER) == "none"
    audit(other, "live bar reconnecting")
    other.screenshot(path=str(SHOTS / "live-reconnecting.png"))
    page.close()  # the first tab goes: its stream ends, the other one's turn comes
    other.wait_for_selector(".live-bar[data-state=live]", timeout=30_000)
    assert live(other)

    # The server goes away: "Reconnecting…", the marker off; back: "Live" again.
    signal_group(web.process, signal.SIGKILL)
    web.process.wait(timeout=10)
    other.wait_for_selector(".live-bar[data-state=reconnecting]", timeout=30_000)
    assert other.inner_text(".live-state") == "Reconnecting…"
    assert other.evaluate(MARKER) == "none"
    # The killed server never gave back the session's one stream: the server back, on the
    # same host, finds its process gone and drops its lease rather than wait for the lapse.
    server.append(LiveServer(app, tmp_path, port=web.port, **SETTINGS))
    other.wait_for_selector(".live-bar[data-state=live]", timeout=20_000)

    # The session ends (a password change): the page says so and offers the way back.
    with app.app_context():
        set_password(EMAIL, PASSWORD)
        db.session.remove()
    other.wait_for_selector(".live-bar[data-state=stopped]", timeout=30_000)
    assert other.inner_text(".live-state") == "Live updates stopped — sign in again"
    assert other.evaluate(MARKER) == "none"
    sign_in = other.locator(".live-sign-in")
    assert sign_in.is_visible()
    assert sign_in.get_attribute("href") == f"/login?next=%2Fbackoffice%2Ftask-runs%2F{run}"
    assert other.locator("[data-live-toggle]").is_hidden()
    audit(other, "live bar stopped")
    other.screenshot(path=str(SHOTS / "live-stopped.png"))
    sign_in.click()
    other.fill("input[name=email]", EMAIL)
    other.fill("input[name=password]", PASSWORD)
    other.click("button[type=submit]")
    other.wait_for_selector(".live-bar[data-state=live]")
    assert other.url == run_page
    browser.close()


def test_a_stream_opened_after_the_session_ended_stops_the_bar_with_no_console_error(
    app, server, chromium
):
    run = a_running_run(app)
    page = chromium.new_page(viewport=DESKTOP)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    signed_in_live(page, f"{server[0].url}/backoffice/task-runs/{run}")
    page.click("[data-live-toggle]")
    page.wait_for_selector(".live-bar[data-state=paused]")

    # Paused, no stream is open; the session ends; the next stream asks without one.
    with app.app_context():
        set_password(EMAIL, PASSWORD)
        db.session.remove()
    page.click("[data-live-toggle]")

    page.wait_for_selector(".live-bar[data-state=stopped]", timeout=30_000)
    assert page.inner_text(".live-state") == "Live updates stopped — sign in again"
    assert errors == []
    page.close()
