"""The course-builder pages: permission, runs list, run page, and its live stream."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from coursebuilder import stages
from coursebuilder import steps as builder_steps
from coursebuilder.models import GenerationEvent, GenerationStep
from extensions import db
from tenancy.models import Tenant
from tests.web.backoffice_support import browser, make_user, sign_in

BUILDER_VIEW = "course-builder.runs.view"
UNKNOWN = "0d7c8d55-52a5-4a4b-9d59-6c8f2a3c9a11"


@pytest.fixture
def builder_app(app):
    app.config["BUILDER_STREAM_SECONDS"] = 1
    with app.app_context():
        db.session.add(Tenant(id=4, name="Umbrella"))
        db.session.commit()
    return app


@pytest.fixture
def builder_web(builder_app):
    # No app context stays pushed: each request gets its own (``g``, the session).
    with builder_app.app_context():
        viewer = make_user("builder@example.test", BUILDER_VIEW)
    web = browser(builder_app)
    sign_in(web, viewer)
    return web


def start_run(app, quizzes: int = 1, fail_first: bool = False) -> str:
    with app.app_context():
        run_uuid = stages.start(
            4, "Rivers <b>and</b> seas", lessons=2, quizzes=quizzes, concurrency=1
        )
        if fail_first:
            step = db.session.execute(
                select(GenerationStep).where(GenerationStep.key == "outline-1")
            ).scalar_one()
            db.session.execute(
                update(GenerationStep).where(GenerationStep.id == step.id).values(status="running")
            )
            db.session.commit()
            stages.fail_run(step.run_id, step.id, "step outline/outline-1 failed: quota <exceeded>")
        db.session.remove()
    return run_uuid


def test_the_runs_list_shows_each_run_with_its_stage_and_links_to_it(builder_app, builder_web):
    run_uuid = start_run(builder_app)
    page = builder_web.get("/builder/runs")

    assert "Rivers &lt;b&gt;and&lt;/b&gt; seas" in page.text  # escaped, never raw
    assert "outline" in page.text
    assert page.click(href=f"/builder/runs/{run_uuid}").status_int == 200


def test_the_run_page_shows_its_stages_steps_and_events(builder_app, builder_web):
    run_uuid = start_run(builder_app, quizzes=0)
    page = builder_web.get(f"/builder/runs/{run_uuid}")

    bar = page.html.select_one(".live-bar")
    assert bar["data-stream"] == f"/builder/runs/{run_uuid}/stream"
    assert page.html.find(id="builder-run")["data-live"] == "build"
    stages = [row.find("td").text for row in page.html.select("table.stages tbody tr")]
    assert stages == ["outline", "lessons", "quizzes", "review"]
    keys = [td.text for td in page.html.select("table.steps td.key")]
    assert keys == ["outline-1", "outline-2"]
    assert "STAGE_OPENED" in page.text


def test_a_failed_run_shows_its_reason_escaped_and_stops_streaming(builder_app, builder_web):
    run_uuid = start_run(builder_app, fail_first=True)
    page = builder_web.get(f"/builder/runs/{run_uuid}")

    assert "quota &lt;exceeded&gt;" in page.text
    assert not page.html.select_one(".live-bar").get("data-stream")
    stream = builder_web.get(f"/builder/runs/{run_uuid}/stream")
    assert stream.content_type == "text/event-stream"
    assert "event: changed" in stream.text and "event: finished" in stream.text
    assert '"status": "failed"' in stream.text


def test_a_step_running_when_its_build_failed_reads_as_interrupted_on_the_page(
    builder_app, builder_web
):
    with builder_app.app_context():
        run_uuid = stages.start(4, "Tides", lessons=2, quizzes=0, concurrency=2)
        run_id = stages.find_run(run_uuid).id
        # Both steps started; the worker of outline-2 then died (SIGKILL) and outline-1 failed.
        db.session.execute(
            update(GenerationStep).where(GenerationStep.run_id == run_id).values(status="running")
        )
        db.session.commit()
        first = db.session.execute(
            select(GenerationStep.id).where(GenerationStep.key == "outline-1")
        ).scalar_one()
        stages.fail_run(run_id, first, "step outline/outline-1 failed: quota exceeded")
        db.session.remove()
    page = builder_web.get(f"/builder/runs/{run_uuid}")

    rows = {
        row.select_one("td.key").text: (
            row.select_one(".pill").text,
            row.select_one("td.error-text").text,
        )
        for row in page.html.select("table.steps tbody tr")
    }
    assert rows == {
        "outline-1": ("failed", "step outline/outline-1 failed: quota exceeded"),
        "outline-2": ("failed", stages.INTERRUPTED),
    }
    assert "running" not in {pill.text for pill in page.html.select("table.steps .pill")}


def test_the_stream_of_a_running_run_ends_after_its_time_limit(builder_app, builder_web):
    run_uuid = start_run(builder_app)
    body = builder_web.get(f"/builder/runs/{run_uuid}/stream").text
    assert body.startswith("retry: 2000")
    assert body.count("event: changed") == 1 and "event: finished" not in body
    # A keep-alive at every other poll, then the page is told to open a new stream.
    assert ": keep-alive" in body and body.endswith("event: rest\ndata: {}\n\n")


def test_a_step_finished_on_another_host_moves_the_page_of_this_one(
    make_app, builder_app, builder_web, tmp_path
):
    # A worker host with an instance folder of its own: nothing it leaves there may matter.
    worker_host = make_app()
    worker_host.instance_path = str(tmp_path / "worker-host")
    with worker_host.app_context():
        run_uuid = stages.start(4, "Deltas", lessons=1, quizzes=0, concurrency=1)
        db.session.remove()

    def marker() -> str:
        page = builder_web.get(f"/builder/runs/{run_uuid}")
        return page.html.select_one(".live-bar")["data-marker"]

    before = marker()
    with worker_host.app_context():
        step = db.session.execute(
            select(GenerationStep).where(GenerationStep.key == "outline-1")
        ).scalar_one()
        builder_steps.execute_step(step.id)
        db.session.remove()

    after = marker()
    assert after != before
    stream = builder_web.get(f"/builder/runs/{run_uuid}/stream").text
    assert f'"marker": "{after}"' in stream


@pytest.mark.parametrize(
    "path",
    [
        "/builder/runs/not-a-uuid",
        f"/builder/runs/{UNKNOWN}",
        "/builder/runs/nope/stream",
        f"/builder/runs?before={UNKNOWN}",
    ],
)
def test_unknown_or_malformed_runs_are_404(builder_web, path):
    builder_web.get(path, status=404)


def test_the_pages_need_a_sign_in_and_the_builder_permission(builder_app):
    run_uuid = start_run(builder_app)
    assert browser(builder_app).get("/builder/runs", status=302).location.startswith("/login")
    with builder_app.app_context():
        other = make_user("runs-only@example.test", "task-runner.runs.view")
    web = browser(builder_app)
    sign_in(web, other)
    for path in ("/builder/runs", f"/builder/runs/{run_uuid}", f"/builder/runs/{run_uuid}/stream"):
        web.get(path, status=403)


def test_the_builder_pages_name_the_tenant(builder_app, builder_web):
    run_uuid = start_run(builder_app)
    assert "Umbrella" in builder_web.get("/builder/runs").text
    assert "Umbrella" in builder_web.get(f"/builder/runs/{run_uuid}").text


BUILDER_MANAGE = "course-builder.runs.manage"


def builder_operator(app, *permissions: str):
    with app.app_context():
        who = make_user(f"{len(permissions)}-builder@example.test", *permissions)
    web = browser(app)
    sign_in(web, who)
    return web


def test_a_failed_build_is_retried_from_its_failed_stage_after_a_confirmation(builder_app):
    run_uuid = start_run(builder_app, fail_first=True)
    web = builder_operator(builder_app, BUILDER_VIEW, BUILDER_MANAGE)
    page = web.get(f"/builder/runs/{run_uuid.upper()}")
    # The failed step says failed; the steps that never started say skipped, not pending.
    statuses = {
        row.select_one("td.key").text: row.select_one(".pill").text
        for row in page.html.select("table.steps tbody tr")
    }
    assert statuses == {"outline-1": "failed", "outline-2": "skipped"}
    assert "STEP_FAILED" in page.text

    confirm = page.forms[1].submit()
    assert confirm.html.select_one(".confirm-count").get_text(" ", strip=True) == "2 steps"
    done = confirm.forms["confirm"].submit().follow()
    assert "Retrying stage outline: 2 steps queued again." in done.text
    assert done.html.find(id="builder-run")["data-run-status"] == "running"
    with builder_app.app_context():
        steps = db.session.execute(select(GenerationStep.key, GenerationStep.status)).all()
    assert {status for _, status in steps} <= {"pending", "queued"}


def test_retrying_a_build_needs_the_manage_permission(builder_app):
    run_uuid = start_run(builder_app, fail_first=True)
    viewer = builder_operator(builder_app, BUILDER_VIEW)
    page = viewer.get(f"/builder/runs/{run_uuid}")
    assert "Retry from stage" not in page.text
    token = page.forms[0]["csrf_token"].value
    viewer.post(f"/builder/runs/{run_uuid}/retry", {"csrf_token": token}, status=403)
    anonymous = browser(builder_app)
    response = anonymous.post(f"/builder/runs/{run_uuid}/retry", status=[302, 400])
    assert response.status_int == 400 or response.location.startswith("/login")


def test_a_running_build_cannot_be_retried(builder_app):
    run_uuid = start_run(builder_app)
    web = builder_operator(builder_app, BUILDER_VIEW, BUILDER_MANAGE)
    token = web.get(f"/builder/runs/{run_uuid}").forms[0]["csrf_token"].value
    answer = web.post(
        f"/builder/runs/{run_uuid}/retry", {"csrf_token": token, "confirm": "yes"}
    ).follow()
    assert "Not retried: run" in answer.text and "only a failed run can be retried" in answer.text
    web.post(f"/builder/runs/{UNKNOWN}/retry", {"csrf_token": token}, status=404)


def test_a_retry_confirmation_sent_twice_retries_the_build_once(make_app):
    # The model fails the step again at once: by the second click the build has failed
    # again, and the second confirmation retried it again (a second model call, a second
    # RUN_RETRIED) although the operator confirmed one retry.
    app = make_app(QUEUE_IMMEDIATE=True)
    with app.app_context():
        db.session.add(Tenant(id=4, name="Umbrella"))
        db.session.commit()
        run_uuid = stages.start(
            4, "Tides", lessons=1, quizzes=0, concurrency=1, fake={"fail_steps": ["outline-1"]}
        )
    web = builder_operator(app, BUILDER_VIEW, BUILDER_MANAGE)
    confirm = web.get(f"/builder/runs/{run_uuid}").forms[1].submit().forms["confirm"]

    first = confirm.submit().follow()
    second = confirm.submit().follow()

    assert "Retrying stage outline: 1 step queued again." in first.text
    assert "Not retried: run" in second.text and "retried since this confirmation" in second.text
    with app.app_context():
        run = stages.find_run(run_uuid)
        attempts = db.session.scalars(select(GenerationStep.attempts)).all()
        kinds = db.session.scalars(
            select(GenerationEvent.kind).where(GenerationEvent.run_id == run.id)
        ).all()
    assert attempts == [2] and kinds.count("RUN_RETRIED") == 1
    # A form that names no retry it was shown after is refused, not guessed at.
    token = confirm["csrf_token"].value
    for bad in ("x", "-1", "9" * 30):
        web.post(
            f"/builder/runs/{run_uuid}/retry",
            {"csrf_token": token, "confirm": "yes", "after_retry": bad},
            status=400,
        )
