"""The on-call console on the run pages: attention badges, the run list's stale and retried
columns, the overview strip, live streams, and the fixes found in review."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from blueprints.backoffice.live import MAX_FOLLOWED
from blueprints.problems import SERVER_REQUEST_LINE_LIMIT
from database import utcnow
from extensions import db
from taskrunner import live_probes, runner
from taskrunner.contract import TaskUnit
from taskrunner.ledger import Actor, ledger
from taskrunner.models import (
    OperatorAction,
    OutboxEvent,
    TaskRun,
    TaskRunUnit,
    UnitThroughput,
)
from tests.web.backoffice_support import MANAGE, VIEW, browser, finished_run, make_user, sign_in

KEYS = [f"k{i}" for i in range(1, 6)]


@pytest.fixture
def failed_uuid(app) -> str:
    with app.app_context():
        return finished_run("diagnostics.probe", KEYS, {"k2": "probe unit 2 failed"})


def running_run(keys: list[str], lost: tuple[str, ...] = ()) -> str:
    """A running run whose units are queued; the ``lost`` ones are claimed, heartbeat dead."""
    dispatch = ledger.transitions.create_run(
        "diagnostics.probe", {}, "test", [TaskUnit(k) for k in keys], 100
    )
    ids = ledger.transitions.dispatch_batch(dispatch, 0, len(keys) + 1)
    for unit_id in ids:
        claim = ledger.transitions.claim(unit_id, dispatch.token)
        if claim.unit.key not in lost:
            # Back to pending: queued, not started, not stale.
            db.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.id == unit_id)
                .values(status="pending", attempts=0)
            )
        else:
            db.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.id == unit_id)
                .values(heartbeat_at=utcnow() - timedelta(hours=1))
            )
    db.session.commit()
    db.session.remove()
    return dispatch.run_uuid


def age_run(run_uuid: str, **delta) -> None:
    """Move a closed run (and its units and events) into the past."""
    shift = timedelta(**delta)
    run = ledger.runs.get_run(run_uuid)
    db.session.execute(
        update(TaskRun)
        .where(TaskRun.id == run.id)
        .values(started_at=run.started_at - shift, finished_at=run.finished_at - shift)
    )
    # Row by row: date arithmetic in SQL differs between the two backends.
    for unit in db.session.execute(
        select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id)
    ).scalars():
        unit.finished_at = unit.finished_at - shift
    db.session.commit()
    db.session.remove()


@pytest.fixture
def viewer_web(app, people):
    web = browser(app)
    sign_in(web, people["viewer"])
    return web


@pytest.fixture
def manager_web(app, people):
    web = browser(app)
    sign_in(web, people["manager"])
    return web


# -- navigation ---------------------------------------------------------------------


def test_the_navigation_counts_runs_failed_in_the_last_24_hours(app, viewer_web, failed_uuid):
    with app.app_context():
        old = finished_run("diagnostics.probe", ["o1"], {"o1": "probe unit 1 failed"})
        age_run(old, hours=25)
        finished_run("diagnostics.probe", ["ok"], {})

    page = viewer_web.get("/backoffice/parked-events")
    badge = page.html.select_one("a.badge-failed")
    assert badge.get_text(strip=True) == "1 failed · 24 h"
    listed = viewer_web.get(badge["href"])
    shown = {a["href"].rsplit("/", 1)[-1] for a in listed.html.select("table.runs td a.uuid")}
    assert shown == {failed_uuid}
    assert "failed in the last 24 hours" in listed.text


def test_the_navigation_counts_stale_units_and_shows_no_badge_at_zero(app, viewer_web):
    assert not viewer_web.get("/backoffice/task-runs").html.select(".badge")
    with app.app_context():
        running_run(["a", "b", "c"], lost=("a", "b"))

    page = viewer_web.get("/backoffice/task-runs")
    badge = page.html.select_one("a[href='/backoffice/stale-units'] .badge-stale")
    assert badge.get_text(" ", strip=True) == "2 stale"


def test_every_page_starts_with_a_skip_link_to_the_main_content(viewer_web, failed_uuid):
    for path in ("/backoffice/task-runs", f"/backoffice/task-runs/{failed_uuid}", "/login"):
        page = viewer_web.get(path).maybe_follow()
        first = page.html.body.find("a")
        assert (first.get_text(), first["href"]) == ("Skip to content", "#main")
        assert page.html.find("main")["id"] == "main"


def test_a_builder_only_operator_lands_on_the_builds_and_sees_only_their_links(app):
    with app.app_context():
        who = make_user("builds@example.com", "course-builder.runs.view")
    web = browser(app)
    landed = sign_in(web, who)
    assert landed.location == "/builder/runs"
    page = landed.follow()
    links = [a["href"] for a in page.html.select("header a")]
    assert "/builder/runs" in links
    assert not any(href.startswith("/backoffice") for href in links)
    # Asking for a page still lands there (and the permission still decides).
    assert sign_in(browser(app), who, "/backoffice/task-runs").location == "/backoffice/task-runs"


def test_signed_in_already_the_login_page_sends_a_builder_only_operator_to_the_builds(app):
    with app.app_context():
        who = make_user("builds@example.com", "course-builder.runs.view")
    web = browser(app)
    sign_in(web, who)
    assert web.get("/login", status=302).location == "/builder/runs"


# -- the run list ---------------------------------------------------------------------


def test_the_run_list_shows_stale_units_per_running_run(app, viewer_web, failed_uuid):
    with app.app_context():
        run_uuid = running_run(["a", "b", "c"], lost=("b",))
    page = viewer_web.get("/backoffice/task-runs")
    row = page.html.find("tr", id=f"run-{run_uuid}")
    assert row.select_one("td[data-label=Stale]").get_text(strip=True) == "1"
    closed = page.html.find("tr", id=f"run-{failed_uuid}")
    assert closed.select_one("td[data-label=Stale]").get_text(strip=True) == "0"


def test_a_retried_run_is_marked_in_the_run_list(app, viewer_web, failed_uuid):
    with app.app_context():
        other = finished_run("diagnostics.probe", ["x"], {"x": "probe unit 1 failed"})
        ledger.actions.reopen_for_retry(failed_uuid, True, Actor("ops", "cli"))
        db.session.remove()
    page = viewer_web.get("/backoffice/task-runs")
    assert page.html.find("tr", id=f"run-{failed_uuid}").select_one(".tag-retried")
    assert not page.html.find("tr", id=f"run-{other}").select_one(".tag-retried")


def test_older_keeps_the_limit_and_the_filters(app, viewer_web):
    with app.app_context():
        for _ in range(3):
            finished_run("diagnostics.probe", ["x"], {"x": "probe unit 1 failed"})
    page = viewer_web.get("/backoffice/task-runs?limit=2&status=failed")
    older = page.html.find("a", rel="next")["href"]
    assert "limit=2" in older and "status=failed" in older
    assert len(viewer_web.get(older).html.select("table.runs tbody tr")) == 1


def test_older_on_a_units_history_keeps_the_limit_and_the_key(app, viewer_web):
    with app.app_context():
        for _ in range(3):
            finished_run("diagnostics.probe", ["x"], {})
    page = viewer_web.get("/backoffice/units?key=x&limit=2")
    older = page.html.find("a", rel="next")
    assert older.get_text() == "Older →"
    assert "limit=2" in older["href"] and "key=x" in older["href"]
    assert len(viewer_web.get(older["href"]).html.select("table.units tbody tr")) == 1


def test_next_units_on_a_run_keeps_the_limit_and_the_status(app, viewer_web, failed_uuid):
    page = viewer_web.get(f"/backoffice/task-runs/{failed_uuid}?unit_status=completed&limit=3")
    first = [a.get_text() for a in page.html.select("#units td.key a")]
    following = page.html.find("a", rel="next")
    assert following.get_text() == "Next units →"
    assert "limit=3" in following["href"] and "unit_status=completed" in following["href"]
    # The limit also survives the status filter's form.
    assert page.html.select_one("#units form.filters input[name=limit]")["value"] == "3"
    rest = [a.get_text() for a in viewer_web.get(following["href"]).html.select("#units td.key a")]
    assert len(first) == 3 and len(rest) == 1 and not set(first) & set(rest)


def test_more_on_the_stale_units_page_keeps_the_limit(app, viewer_web):
    with app.app_context():
        running_run(["a", "b", "c"], lost=("a", "b", "c"))
    page = viewer_web.get("/backoffice/stale-units?limit=2")
    more = page.html.find("a", rel="next")
    assert more.get_text() == "More →" and "limit=2" in more["href"]
    assert len(viewer_web.get(more["href"]).html.select("table.units tbody tr")) == 1


def test_a_later_stale_page_left_empty_still_counts_the_stale_units(app, viewer_web):
    with app.app_context():
        running_run(["a", "b", "c"], lost=("a", "b", "c"))
    more = viewer_web.get("/backoffice/stale-units?limit=2").html.find("a", rel="next")
    with app.app_context():  # the unit the next page would show settles meanwhile
        db.session.execute(
            update(TaskRunUnit).where(TaskRunUnit.unit_key == "c").values(status="completed")
        )
        db.session.commit()

    page = viewer_web.get(more["href"])

    assert not page.html.select("table.units tbody tr")
    assert page.html.select_one("h1 .count").get_text() == "2"
    empty = page.html.select_one("p.empty")
    assert "Nothing is stale" not in empty.get_text()
    assert viewer_web.get(empty.a["href"]).html.select_one("h1 .count").get_text() == "2"


def test_the_overview_strip_draws_units_per_minute_and_per_hour_as_svg(app, viewer_web):
    with app.app_context():
        finished_run("diagnostics.probe", KEYS, {"k1": "probe unit 1 failed"})
        old = finished_run("diagnostics.probe", ["o1", "o2"], {})
        age_run(old, hours=3)
    page = viewer_web.get("/backoffice/task-runs")
    hour, day = page.html.select("section.overview figure")
    assert "4 completed · 1 failed" in hour.figcaption.get_text(" ", strip=True)
    assert "6 completed · 1 failed" in day.figcaption.get_text(" ", strip=True)
    svg = hour.find("svg")
    assert svg["role"] == "img" and "4 units completed, 1 failed" in svg["aria-label"]
    # Completed rise above the line, failed hang below it: readable without colour.
    assert [t.get_text() for t in svg.find_all("title")][-1].endswith("4 completed, 1 failed")
    assert len(day.find("svg").find_all("g")) == 2
    # No inline style or script anywhere: it draws under the CSP.
    assert "style=" not in page.text and "<script>" not in page.text


def test_the_run_list_reuses_its_strip_for_a_few_seconds_and_the_strip_page_never(make_app, people):
    app = make_app(OVERVIEW_CACHE_SECONDS=3600)
    with app.app_context():
        who = make_user("cached@example.com", VIEW)
    web = browser(app)
    sign_in(web, who)

    def hour_caption(path: str) -> str:
        figure = web.get(path).html.select_one("section.overview figure")
        return figure.figcaption.get_text(" ", strip=True)

    assert "0 completed · 0 failed" in hour_caption("/backoffice/task-runs")
    with app.app_context():
        finished_run("diagnostics.probe", KEYS, {"k1": "probe unit 1 failed"})
    assert "0 completed · 0 failed" in hour_caption("/backoffice/task-runs")
    assert "4 completed · 1 failed" in hour_caption("/backoffice/overview")
    app.extensions["backoffice.overview"].clear()  # the seconds passed
    assert "4 completed · 1 failed" in hour_caption("/backoffice/task-runs")


def test_the_throughput_buckets_by_minute_and_by_hour_and_forgets_after_a_day(ctx):
    finished_run("diagnostics.probe", ["a", "b"], {"b": "probe unit 2 failed"})
    old = finished_run("diagnostics.probe", ["c"], {})
    age_run(old, hours=25)
    mid = finished_run("diagnostics.probe", ["d"], {})
    age_run(mid, minutes=90)
    now = utcnow()
    seen = ledger.throughput.read(now)
    assert len(seen.minutes) == 60 and len(seen.hours) == 24
    assert seen.last_hour == (1, 1) and seen.last_day == (2, 1)
    assert (seen.minutes[-1].completed, seen.minutes[-1].failed) == (1, 1)
    assert seen.minutes[-1].start == now.replace(second=0, microsecond=0)


def test_the_overview_page_answers_alone(viewer_web, failed_uuid):
    page = viewer_web.get("/backoffice/overview")
    assert len(page.html.select("section.overview svg")) == 2


# -- the run page: review fixes ---------------------------------------------------------


def test_a_cancelled_run_is_not_done_lists_its_units_once_and_is_not_drawn_as_an_error(
    app, viewer_web
):
    with app.app_context():
        run_uuid = running_run([f"u{i}" for i in range(1, 21)])
        runner.cancel(run_uuid)
    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}")
    assert page.html.select_one(".progress-big .pct").get_text() == "0% done, 20 skipped"
    listed = [a.get_text() for a in page.html.select("td.key a")]
    assert sorted(listed) == sorted(f"u{i}" for i in range(1, 21))
    reasons = page.html.find_all(string=re.compile("cancelled by operator"))
    assert reasons and all("error-text" not in r.parent.get("class", []) for r in reasons)
    assert "All 20 units of this run are listed above." in page.text


def test_the_duration_does_not_count_the_time_closed_before_a_retry(app, viewer_web):
    with app.app_context():
        run_uuid = finished_run("diagnostics.probe", ["a"], {"a": "probe unit 1 failed"})
        run = ledger.runs.get_run(run_uuid)
        start = utcnow() - timedelta(hours=3)
        closed = start + timedelta(minutes=2)
        retried = closed + timedelta(hours=2)
        db.session.execute(
            update(TaskRun)
            .where(TaskRun.id == run.id)
            .values(started_at=start, finished_at=retried + timedelta(minutes=1))
        )
        db.session.execute(
            update(OutboxEvent)
            .where(OutboxEvent.task_run_id == run.id, OutboxEvent.name == "tasks.run.failed")
            .values(created_at=closed)
        )
        db.session.add(
            OperatorAction(
                task_run_id=run.id,
                action="retry",
                actor="ops",
                source="cli",
                detail={"units": 1},
                created_at=retried,
            )
        )
        db.session.commit()
        assert ledger.attention.idle_seconds(ledger.runs.get_run(run_uuid)) == 2 * 3600
        db.session.remove()
    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}")
    duration = page.html.find("dt", string="Duration").find_next("dd").get_text(" ", strip=True)
    assert duration.startswith("3 min 00 s")
    assert "not counting 2 h 00 min closed before a retry" in duration
    row = viewer_web.get("/backoffice/task-runs").html.find("tr", id=f"run-{run_uuid}")
    assert row.select_one("td[data-label=Took]").get_text(strip=True) == "3 min 00 s"
    # "· 1 unit", not "· 1 units".
    assert "retry · 1 unit " in page.html.select_one("ul.log li").get_text(" ", strip=True) + " "


def test_an_upper_case_run_uuid_is_the_same_run(viewer_web, failed_uuid):
    upper = failed_uuid.upper()
    assert failed_uuid in viewer_web.get(f"/backoffice/task-runs/{upper}").text
    viewer_web.get(f"/backoffice/task-runs/{upper}/errors", status=200)
    api = viewer_web.get(f"/api/v1/backoffice/task-runs/{upper}")
    assert api.json["uuid"] == failed_uuid


def test_the_run_list_stream_follows_a_run_named_in_upper_case(app, failed_uuid):
    with app.app_context():
        [run_id] = live_probes.run_ids_of([failed_uuid])
        assert live_probes.run_ids_of([failed_uuid.upper()]) == [run_id]


def test_event_payloads_read_as_fields_and_text_not_json_escapes(app, viewer_web):
    with app.app_context():
        run_uuid = finished_run("diagnostics.probe", ["a"], {"a": "unhandled x.Error — see logs"})
    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/events")
    assert "\\u2014" not in page.text
    fields = page.html.select("dl.kv dt")
    assert "unit key" in [f.get_text() for f in fields]
    assert page.html.find("dd", string="unhandled x.Error — see logs")


def test_the_cancel_banner_says_how_many_finished_since_the_confirmation(app, manager_web):
    with app.app_context():
        run_uuid = running_run([f"u{i}" for i in range(1, 4)])
    confirm = manager_web.post(
        f"/backoffice/task-runs/{run_uuid}/cancel",
        {"csrf_token": manager_web.get("/backoffice/task-runs").forms[0]["csrf_token"].value},
    )
    form = confirm.forms["confirm"]
    assert form["expected"].value == "3"
    form["expected"].force_value("1649")
    done = form.submit().follow()
    banner = done.html.select_one(".flash-success").get_text()
    assert banner == (
        "Run cancelled; 3 units skipped. 1,649 units were pending or running when you "
        "confirmed; 1,646 units finished in between."
    )


# -- live streams -----------------------------------------------------------------------


def test_a_running_run_page_follows_its_stream_and_a_closed_one_does_not(
    app, viewer_web, failed_uuid
):
    with app.app_context():
        run_uuid = running_run(["a"])
    live = viewer_web.get(f"/backoffice/task-runs/{run_uuid}").html.select_one(".live-bar")
    assert live["data-stream"] == f"/backoffice/task-runs/{run_uuid}/stream"
    assert live.has_attr("hidden")  # shown by the script only
    closed = viewer_web.get(f"/backoffice/task-runs/{failed_uuid}").html.select_one(".live-bar")
    assert not closed.get("data-stream")
    assert "data-refresh" not in viewer_web.get(f"/backoffice/task-runs/{run_uuid}").text


def test_the_run_stream_says_changed_then_finished_for_a_closed_run(viewer_web, failed_uuid):
    stream = viewer_web.get(f"/backoffice/task-runs/{failed_uuid}/stream")
    assert stream.content_type == "text/event-stream"
    assert stream.text.index("event: changed") < stream.text.index("event: finished")
    assert '"status": "completed_with_failures"' in stream.text


def test_a_stream_refused_to_a_browsers_event_source_is_an_empty_204(app, people, failed_uuid):
    # A sign-in or error page would be read as a broken stream (an error in the console).
    stream = f"/backoffice/task-runs/{failed_uuid}/stream"
    event_source = {"Accept": "text/event-stream"}
    signed_out, stranger = browser(app), browser(app)
    sign_in(stranger, people["stranger"])  # signed in, without the permission
    for web in (signed_out, stranger):
        refused = web.get(stream, headers=event_source, status=204)
        assert refused.body == b""
    assert signed_out.get(stream, status=302).location.startswith("/login?next=")
    stranger.get(stream, status=403)
    signed_out.get(f"/builder/runs/{failed_uuid}/stream", headers=event_source, status=204)


def test_the_run_stream_of_a_running_run_ends_after_its_time_limit(app, viewer_web):
    with app.app_context():
        run_uuid = running_run(["a", "b"])
    body = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/stream").text
    assert body.count("event: changed") == 1 and "event: finished" not in body


def test_the_run_stream_moves_when_a_unit_finishes(app):
    with app.app_context():
        run_uuid = running_run(["a", "b"])
        run = ledger.runs.get_run(run_uuid)
        before = ledger.live.live_marker([run.id])
        unit = db.session.execute(
            update(TaskRunUnit)
            .where(TaskRunUnit.task_run_id == run.id, TaskRunUnit.unit_key == "a")
            .values(status="completed")
            .returning(TaskRunUnit.id)
        ).scalar_one()
        db.session.commit()
        assert unit and ledger.live.live_marker([run.id]) != before


def test_the_run_list_stream_takes_only_run_uuids(viewer_web, failed_uuid):
    ok = viewer_web.get(f"/backoffice/task-runs/stream?run={failed_uuid}")
    assert ok.content_type == "text/event-stream" and "event: changed" in ok.text
    viewer_web.get("/backoffice/task-runs/stream?run=nope", status=400)
    many = "&".join(f"run={failed_uuid}" for _ in range(201))
    viewer_web.get(f"/backoffice/task-runs/stream?{many}", status=400)


def test_the_run_list_streams_only_while_it_shows_runs(app, viewer_web):
    assert not viewer_web.get("/backoffice/task-runs").html.select(".live-bar[data-stream]")
    with app.app_context():
        run_id = ledger.runs.get_run(running_run(["a"])).id
        db.session.remove()
    bar = viewer_web.get("/backoffice/task-runs").html.select_one(".live-bar")
    assert bar["data-stream"] == "/backoffice/task-runs/stream"
    assert f"{run_id}:running:" in viewer_web.get(bar["data-stream"]).text


def test_the_run_lists_stream_opens_at_its_longest_page_of_running_runs(app, viewer_web):
    """200 running runs on a page (``limit=200``): their uuids in the stream's address
    made a request line of 8,241 bytes, over gunicorn's 8,190 (and a proxy's 8 KiB), so
    the page's stream was refused at every try and the list never went live."""
    with app.app_context():
        ids = {ledger.runs.get_run(running_run(["a"])).id for _ in range(MAX_FOLLOWED)}
        db.session.remove()
    page = viewer_web.get("/backoffice/task-runs?limit=200&status=running")
    stream = page.html.select_one(".live-bar")["data-stream"]

    assert len(f"GET {stream} HTTP/1.1") <= SERVER_REQUEST_LINE_LIMIT
    first = viewer_web.get(stream).text.split("event: changed", 1)[1].split("\n\n", 1)[0]
    followed = {
        int(part.split(":")[0]) for part in first.split("|", 1)[1].split(";") if ":" in part
    }
    assert followed == ids


@pytest.mark.parametrize("permission", [VIEW, MANAGE])
def test_the_new_pages_need_the_view_permission(app, permission, failed_uuid):
    with app.app_context():
        who = make_user(f"{permission}@example.com", permission)
    web = browser(app)
    sign_in(web, who)
    status = 200 if permission == VIEW else 403
    for path in ("/backoffice/overview", f"/backoffice/task-runs/{failed_uuid}/stream"):
        web.get(path, status=status)


def test_settled_minutes_are_rolled_up_once_and_the_last_ones_counted_live(ctx):
    settled = finished_run("diagnostics.probe", ["a", "b"], {"b": "probe unit 2 failed"})
    age_run(settled, minutes=10)
    finished_run("diagnostics.probe", ["c"], {})  # this minute: live, not stored yet
    ledger.throughput.roll()  # what the periodic taskrunner.roll_throughput does
    first = ledger.throughput.read()
    assert first.last_hour == (2, 1)
    db.session.rollback()
    # One row per minute and type that settled units (the empty type marks rolled minutes).
    stored = (
        db.session.execute(select(UnitThroughput).where(UnitThroughput.type != "")).scalars().all()
    )
    assert [(r.type, r.completed, r.failed) for r in stored] == [("diagnostics.probe", 1, 1)]
    # The roll-up is the record: units pruned since still count, and nothing doubles.
    db.session.execute(
        TaskRunUnit.__table__.delete().where(
            TaskRunUnit.task_run_id == ledger.runs.get_run(settled).id
        )
    )
    db.session.commit()
    assert ledger.throughput.read().last_hour == (2, 1)
    db.session.rollback()
    counted = select(func.count()).select_from(UnitThroughput).where(UnitThroughput.type != "")
    assert db.session.execute(counted).scalar_one() == 1


def test_reading_the_strip_writes_nothing_and_counts_what_no_roll_up_holds_yet(ctx):
    """A GET page never writes: a roll-up that is behind (no consumer ran the periodic
    task) makes the strip count live, it is not caught up by the read."""
    settled = finished_run("diagnostics.probe", ["a", "b"], {"b": "probe unit 2 failed"})
    age_run(settled, minutes=10)
    finished_run("diagnostics.probe", ["c"], {})

    assert ledger.throughput.read().last_hour == (2, 1)
    assert ledger.throughput.read().last_day == (2, 1)

    db.session.rollback()
    assert db.session.execute(select(func.count()).select_from(UnitThroughput)).scalar_one() == 0


def test_a_skipped_unit_says_why_without_calling_it_an_error(app, viewer_web):
    with app.app_context():
        run_uuid = running_run(["a"])
        runner.cancel(run_uuid)
    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/units/a")
    assert "Why it was skipped" in page.text and "Last error" not in page.text
    history = viewer_web.get("/backoffice/units?key=a")
    reason = history.html.find("td", string="cancelled by operator")
    assert "reason-text" in reason["class"] and "error-text" not in reason["class"]
    assert reason["data-label"] == "Reason"
