"""Schedules through the backoffice: the list and detail pages, the nav badge, run now /
pause / resume (manage, POST + CSRF, a confirmation page, recorded), the JSON API and
the CLI over the same service."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import select

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.contract import operations
from taskrunner.ledger import Actor, ledger
from taskrunner.models import OperatorAction
from tests.unit.test_cli_refusals import database_refusing_inserts_into
from tests.web.backoffice_support import browser, sign_in

STATEMENTS = "payments.monthly_statements"
SWEEP = "taskrunner.detect_stuck"


def signed_in(app, people, who: str = "manager"):
    web = browser(app)
    sign_in(web, people[who])
    return web


def missed_sweep(app) -> None:
    """The sweep's scheduler has been down for two hours: its slots are missed on read."""
    with app.app_context():
        start = utcnow().replace(microsecond=0) - timedelta(hours=2)
        ledger.schedules.register([SWEEP], now=start)
        db.session.remove()


def action(page, name: str, verb: str):
    """Submit one of the schedule page's action forms (its button is named after it)."""
    [form] = [f for f in page.forms.values() if f.action == f"/backoffice/schedules/{name}/{verb}"]
    return form.submit(verb)


def default_queue_jobs(app) -> int:
    return app.extensions["queues"].huey("default").pending_count()


@contextmanager
def unreachable_queue(make_app, tmp_path, **settings):
    """An app whose SQLite queue file lies under a regular file, until the block ends (on
    either ledger database: the queue is a file whichever the backend)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    queue = str(blocker / "queue.sqlite3")
    try:
        yield make_app(QUEUE_DRIVER="sqlite", QUEUE_SQLITE_PATH=queue, **settings)
    finally:
        blocker.unlink()


def run_now_records(app) -> list[dict]:
    with app.app_context():
        return list(
            db.session.execute(
                select(OperatorAction.detail)
                .where(OperatorAction.action == "schedule-run-now")
                .order_by(OperatorAction.id)
            ).scalars()
        )


def test_the_list_shows_every_schedule_its_rule_and_a_strip_readable_without_colour(app, people):
    missed_sweep(app)
    page = signed_in(app, people, "viewer").get("/backoffice/schedules")
    rows = {row.select_one("th").get_text(strip=True): row for row in page.html.select("tbody tr")}
    assert STATEMENTS in rows and SWEEP in rows
    assert "on day 1 at 02:00 UTC" in rows[STATEMENTS].get_text()
    strip = rows[SWEEP].select("ol.slot-strip li")
    assert len(strip) == 14
    # Each slot says its state in words (and a symbol): colour is never the only cue.
    assert all("missed" in slot.get_text() for slot in strip)
    assert "missed · 24 h" in rows[SWEEP].get_text()
    badge = page.html.select_one('nav.nav a[href="/backoffice/schedules"] .badge')
    assert badge is not None and badge.get_text(strip=True).startswith("1")


def test_a_paused_schedules_row_still_says_the_slots_it_missed_that_the_badge_counts(app, people):
    missed_sweep(app)
    with app.app_context():
        operations.pause_schedule(SWEEP, Actor("ops@example.com"))
    page = signed_in(app, people, "viewer").get("/backoffice/schedules")
    [row] = [row for row in page.html.select("tbody tr") if SWEEP in row.select_one("th").text]
    state = row.select_one('td[data-label="State"]').get_text(" ", strip=True)
    assert "paused" in state and "missed · 24 h" in state
    badge = page.html.select_one('nav.nav a[href="/backoffice/schedules"] .badge')
    assert badge is not None and badge.get_text(strip=True).startswith("1")


def test_no_badge_when_no_schedule_missed_a_slot(app, people):
    page = signed_in(app, people, "viewer").get("/backoffice/schedules")
    link = page.html.select_one('nav.nav a[href="/backoffice/schedules"]')
    assert link is not None and link.select_one(".badge") is None


def test_the_detail_page_links_each_slot_to_its_run(app, people):
    with app.app_context():
        slot = utcnow().replace(microsecond=0) - timedelta(minutes=1)
        ledger.schedules.claim(STATEMENTS, slot, "host-a:1")
        run_uuid = runner.start("diagnostics.probe", {"units": 1}, "schedule").uuid
        ledger.schedules.finish(STATEMENTS, slot, None, run_uuid)
        db.session.remove()
    page = signed_in(app, people, "viewer").get(f"/backoffice/schedules/{STATEMENTS}")
    assert page.html.select_one(f'a[href="/backoffice/task-runs/{run_uuid}"]') is not None
    assert "host-a:1" in page.text
    assert page.html.select_one('button[name="run-now"]') is None  # a viewer may not act
    signed_in(app, people, "viewer").get("/backoffice/schedules/no.such", status=404)


def test_pause_and_resume_go_through_a_confirmation_and_are_recorded(app, people):
    web = signed_in(app, people)
    page = web.get(f"/backoffice/schedules/{SWEEP}")
    confirm = action(page, SWEEP, "pause")
    assert f"Pause {SWEEP}" in confirm.text and "never missed" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert f"{SWEEP} paused." in done.text
    assert "pill-paused" in done.text and "manager@example.com" in done.text
    resumed = action(done, SWEEP, "resume").forms["confirm"].submit().follow()
    assert f"{SWEEP} resumed." in resumed.text
    with app.app_context():
        actions = db.session.execute(
            select(OperatorAction.action, OperatorAction.actor, OperatorAction.source).order_by(
                OperatorAction.id
            )
        ).all()
    assert [tuple(a) for a in actions] == [
        ("schedule-pause", "manager@example.com", "web"),
        ("schedule-resume", "manager@example.com", "web"),
    ]


def test_run_now_is_refused_while_the_previous_run_runs_unless_confirmed_again(app, people):
    with app.app_context():
        slot = utcnow().replace(microsecond=0) - timedelta(minutes=1)
        ledger.schedules.claim(STATEMENTS, slot, "host-a:1")
        running = runner.start("diagnostics.probe", {"units": 2}, "schedule").uuid
        ledger.schedules.finish(STATEMENTS, slot, None, running)
        db.session.remove()
    before = default_queue_jobs(app)
    web = signed_in(app, people)
    confirm = action(web.get(f"/backoffice/schedules/{STATEMENTS}"), STATEMENTS, "run-now")
    assert "still running" in confirm.text and running in confirm.text
    # A confirmation page that did not name the running run is not a second confirmation.
    form = confirm.forms["confirm"]
    form["running"] = "something-else"
    again = form.submit()
    assert "still running" in again.text and default_queue_jobs(app) == before
    done = again.forms["confirm"].submit().follow()
    assert "was enqueued" in done.text and default_queue_jobs(app) == before + 1
    assert "run now" in done.text and "manager@example.com" in done.text


def test_a_confirmation_beside_a_running_run_submitted_twice_starts_one_more_not_two(app, people):
    with app.app_context():
        slot = utcnow().replace(microsecond=0) - timedelta(minutes=1)
        ledger.schedules.claim(STATEMENTS, slot, "host-a:1")
        running = runner.start("diagnostics.probe", {"units": 2}, "schedule").uuid
        ledger.schedules.finish(STATEMENTS, slot, None, running)
        db.session.remove()
    before = default_queue_jobs(app)
    web = signed_in(app, people)
    confirm = action(web.get(f"/backoffice/schedules/{STATEMENTS}"), STATEMENTS, "run-now")
    assert "still running" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert "was enqueued" in done.text and default_queue_jobs(app) == before + 1
    # The same confirmation again (a double click, a reload): it named the running run, and
    # now a run now of its own waits too.
    again = confirm.forms["confirm"].submit()
    assert "has not started yet" in again.text and default_queue_jobs(app) == before + 1


def test_a_second_click_on_run_now_before_a_worker_took_the_first_asks_again(app, people):
    web = signed_in(app, people)
    before = default_queue_jobs(app)
    confirm = action(web.get(f"/backoffice/schedules/{SWEEP}"), SWEEP, "run-now")
    done = confirm.forms["confirm"].submit().follow()
    assert "was enqueued" in done.text and default_queue_jobs(app) == before + 1
    # The same confirmation submitted again (a double click, a reload): nothing enqueued.
    again = confirm.forms["confirm"].submit()
    assert "has not started yet" in again.text and default_queue_jobs(app) == before + 1
    done = again.forms["confirm"].submit().follow()
    assert "was enqueued" in done.text and default_queue_jobs(app) == before + 2


def test_operator_actions_need_the_manage_permission_and_a_csrf_token(app, people):
    viewer = signed_in(app, people, "viewer")
    token = viewer.get("/backoffice/schedules").html.select_one('input[name="csrf_token"]')
    for verb in ("run-now", "pause", "resume"):
        form = {"confirm": "yes", "csrf_token": token["value"]}
        viewer.post(f"/backoffice/schedules/{SWEEP}/{verb}", form, status=403)
    manager = signed_in(app, people)
    manager.post(f"/backoffice/schedules/{SWEEP}/pause", {"confirm": "yes"}, status=400)
    manager.post("/backoffice/schedules/no.such/pause", status=400)


def test_the_json_api_answers_what_the_page_shows(app, people):
    missed_sweep(app)
    web = signed_in(app, people, "viewer")
    listed = web.get("/api/v1/backoffice/schedules").json["schedules"]
    sweep = next(s for s in listed if s["name"] == SWEEP)
    assert sweep["missed"] > 0 and len(sweep["slots"]) == 14
    assert {s["state"] for s in sweep["slots"]} == {"missed"}
    assert sweep["rule"] == "every 300 s (TASK_RUNNER_SWEEP_SECONDS)"
    one = web.get(f"/api/v1/backoffice/schedules/{SWEEP}").json
    assert one["name"] == SWEEP and len(one["slots"]) > 14
    missing = web.get("/api/v1/backoffice/schedules/no.such", status=404)
    assert missing.content_type == "application/problem+json"


def test_the_cli_lists_shows_and_acts_and_refuses_an_unknown_name(app):
    cli = app.test_cli_runner()
    listed = cli.invoke(args=["schedules", "list", "--json"])
    assert listed.exit_code == 0
    assert STATEMENTS in {s["name"] for s in json.loads(listed.stdout)["schedules"]}
    assert "on day 1 at 02:00 UTC" in cli.invoke(args=["schedules", "list"]).output
    shown = cli.invoke(args=["schedules", "show", SWEEP, "--json"])
    assert json.loads(shown.stdout)["name"] == SWEEP
    assert "paused" in cli.invoke(args=["schedules", "pause", SWEEP]).output
    assert json.loads(cli.invoke(args=["schedules", "show", SWEEP, "--json"]).stdout)["paused"]
    assert "resumed" in cli.invoke(args=["schedules", "resume", SWEEP]).output
    assert "enqueued" in cli.invoke(args=["schedules", "run-now", SWEEP]).output
    # Its slot waits for a worker: another is refused until confirmed, which here is --yes.
    again = cli.invoke(args=["schedules", "run-now", SWEEP])
    assert again.exit_code == 1
    assert again.stderr.endswith("confirm again to start another (with --yes)\n")
    for verb in ("show", "run-now", "pause", "resume"):
        result = cli.invoke(args=["schedules", verb, "no.such"])
        assert result.exit_code == 1
        assert result.stderr == "error: no schedule named 'no.such'\n"
    with app.app_context():
        actions = db.session.execute(
            select(OperatorAction.action, OperatorAction.source).order_by(OperatorAction.id)
        ).all()
    assert [tuple(a) for a in actions] == [
        ("schedule-pause", "cli"),
        ("schedule-resume", "cli"),
        ("schedule-run-now", "cli"),
    ]


# The queue file's folder is a file: the reason names the setting.
NOT_ENQUEUED = (
    f"{SWEEP}: its slot could not be enqueued: the queue could not be reached "
    r"\(QUEUE_SQLITE_PATH: .*Not a directory.*\)"
)


def test_a_run_now_the_queue_refused_is_one_line_in_the_cli_and_blocks_no_next_one(
    make_app, tmp_path
):
    with unreachable_queue(make_app, tmp_path) as app:
        failed = app.test_cli_runner().invoke(args=["schedules", "run-now", SWEEP])
    assert failed.exit_code == 1
    assert re.fullmatch(f"error: {NOT_ENQUEUED}\n", failed.stderr)
    [record] = run_now_records(app)
    assert re.fullmatch(r"the queue could not be reached \(.*\)", record["failed"])
    # The queue is back: a plain run now is not refused as if the failed one waited.
    again = app.test_cli_runner().invoke(args=["schedules", "run-now", SWEEP])
    assert again.exit_code == 0 and "enqueued" in again.output
    assert default_queue_jobs(app) == 1
    assert ["failed" in record for record in run_now_records(app)] == [True, False]


def test_a_run_now_the_queue_refused_says_so_on_the_page_and_in_its_actions(
    make_app, tmp_path, people
):
    with unreachable_queue(make_app, tmp_path) as app:
        web = signed_in(app, people)
        confirm = action(web.get(f"/backoffice/schedules/{SWEEP}"), SWEEP, "run-now")
        done = confirm.forms["confirm"].submit().follow()
    flashed = done.html.select_one(".flash-error").get_text()
    assert re.search(f"Not started: {NOT_ENQUEUED}", flashed)
    assert "was enqueued" not in done.text
    [listed] = [li.get_text(" ", strip=True) for li in done.html.select("ul.plain li")]
    assert "run now" in listed and "not enqueued: the queue could not be reached" in listed
    # The next one asks no confirmation beyond its own: nothing of the failed one waits.
    again = action(done, SWEEP, "run-now")
    assert "has not started yet" not in again.text
    assert "was enqueued" in again.forms["confirm"].submit().follow().text


def test_a_schedule_action_the_database_refuses_to_record_is_one_line_or_a_message(app, people):
    cli, web = app.test_cli_runner(), signed_in(app, people)
    with app.app_context():
        ledger.schedules.register([SWEEP], now=utcnow())
        db.session.remove()
    token = web.get("/backoffice/schedules").forms[0]["csrf_token"].value
    with database_refusing_inserts_into(app, "operator_actions"):
        said = {verb: cli.invoke(args=["schedules", verb, SWEEP]) for verb in ("pause", "run-now")}
        pages = {
            verb: web.post(
                f"/backoffice/schedules/{SWEEP}/{verb}", {"csrf_token": token, "confirm": "yes"}
            ).follow()
            for verb in ("pause", "run-now")
        }

    for verb, what in (("pause", "the pause of schedule"), ("run-now", "the run now of")):
        assert said[verb].exit_code == 1
        assert said[verb].stderr.startswith(f"error: {what} {SWEEP} could not be recorded: ")
        assert said[verb].stderr.count("\n") == 1
        [flash] = [p.get_text() for p in pages[verb].html.select(".flash")]
        assert f"{what} {SWEEP} could not be recorded" in flash
    assert default_queue_jobs(app) == 0
    with app.app_context():
        assert not operations.schedule(SWEEP).paused
