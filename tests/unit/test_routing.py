"""The routing rule of SPEC §12, the two worker modes, and the deployment files.

For every job and every task type: its queue exists, the queue's consumer can
enforce its timeout (process workers), the timeout is within the consumer's
limit, and the stuck threshold is above the timeout (or an operator would retry
a unit that is still running and pay for it twice).
"""

from __future__ import annotations

import configparser
import os
import shlex
import signal
import subprocess
import sys

import pytest
from sqlalchemy import select

from coursebuilder import jobs, stages
from coursebuilder import steps as builder_steps
from coursebuilder.models import GenerationRun, GenerationStep
from extensions import db
from harness import process_tree
from taskrunner import runner
from taskrunner.dispatch import RUN_UNIT, queue_of
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.registry import registry_of
from tasks import workers
from tasks.routing import PERIODIC_QUEUE, QUEUE_NAMES, QUEUES, TYPE_ROUTES, routes
from tenancy.models import Tenant
from tests.support import ROOT, process_env, wait_for

DEPLOY = ROOT / "deploy" / "systemd"


def stuck_seconds(minutes: int | None, app) -> int:
    return 60 * (minutes or app.config["TASK_RUNNER_STUCK_AFTER_MINUTES"])


def test_every_queue_has_a_consumer_that_enforces_timeouts():
    assert set(QUEUES) == set(QUEUE_NAMES)
    for spec in QUEUES.values():
        # Hard (process workers) or, on the I/O lane's thread workers, soft.
        assert spec.enforces_timeouts or spec.soft_timeouts, spec
        assert spec.workers >= 1


def test_the_io_lane_runs_many_threads_and_hands_its_units_back_on_stop():
    spec = QUEUES["io"]
    assert (spec.worker_type, spec.timeouts, spec.stop) == ("thread", "soft", "hand-back")
    assert spec.workers >= 16
    assert set(TYPE_ROUTES.values()) <= set(QUEUE_NAMES)


def test_every_job_is_routed_to_a_queue_whose_consumer_covers_its_timeout(app):
    assert stages.STEP_JOB in routes.jobs and RUN_UNIT in routes.jobs
    for spec in routes.jobs.values():
        served_by = QUEUE_NAMES if spec.queue is None else (spec.queue,)
        for queue in served_by:
            assert queue in QUEUES, spec.name
            assert 0 < spec.timeout <= QUEUES[queue].max_timeout, (spec.name, queue)
        assert spec.timeout < stuck_seconds(spec.stuck_after_minutes, app), spec.name


def test_every_task_type_fits_its_queue_and_its_stuck_threshold(app):
    # The unit wrapper runs on every queue and takes its timeout from each type's options.
    registry = registry_of(app)
    definitions = registry.definitions()
    assert {"diagnostics.probe", "payments.monthly_statements"} <= set(registry.types())
    for definition in definitions:
        options = definition.options()
        with app.app_context():
            queue = queue_of(definition.type())
        assert queue in QUEUES, definition.type()
        assert QUEUES[queue].enforces_timeouts or QUEUES[queue].soft_timeouts
        assert 0 < options.timeout <= QUEUES[queue].max_timeout, definition.type()
        assert options.timeout < stuck_seconds(options.stuck_after_minutes, app), definition.type()


def test_periodic_jobs_fit_the_consumer_that_schedules_them():
    assert routes.periodic
    for spec in routes.periodic.values():
        assert 0 < spec.timeout <= QUEUES[PERIODIC_QUEUE].max_timeout, spec.name


def test_the_builder_step_job_is_registered_on_the_builder_queue_only_with_one_try(app):
    with app.app_context():
        queues = app.extensions["queues"]
        step = queues.task(stages.STEP_JOB)
        assert step.huey is queues.huey("builder")
        task = step.s(1)
        assert (task.timeout, task.retries) == (1800, 0)
        for queue in QUEUE_NAMES:
            names = set(queues.huey(queue)._registry._registry)
            assert any(name.endswith(RUN_UNIT) for name in names), queue
            assert any(name.endswith(stages.STEP_JOB) for name in names) == (queue == "builder")


def test_the_llm_call_gives_up_before_the_step_timeout(app):
    assert app.config["LLM_TIMEOUT_SECONDS"] < builder_steps.STEP_TIMEOUT


def flags(command) -> dict[str, str | bool]:
    args = list(command)
    found: dict[str, str | bool] = {}
    for index, arg in enumerate(args):
        if arg in ("-k", "-w", "-d", "-m"):
            found[arg] = args[index + 1]
        elif arg == "-n":
            found["-n"] = True
    return found


def test_per_queue_mode_starts_one_consumer_per_queue_as_the_table_says():
    plans = workers.plan("per-queue")
    assert [p.queues for p in plans] == [(q,) for q in QUEUE_NAMES]
    for item in plans:
        spec = QUEUES[item.queues[0]]
        assert item.command[1:4] == (
            "-m",
            "huey.bin.huey_consumer",
            f"tasks.consumer.{spec.name.replace('-', '_')}",
        )
        options = flags(item.command)
        assert options["-k"] == spec.worker_type and options["-w"] == str(spec.workers)
        assert ("-n" not in options) == item.periodic
    assert [p.queues[0] for p in plans if p.periodic] == [PERIODIC_QUEUE]


def test_lean_mode_starts_one_consumer_serving_every_queue_once():
    [lean] = workers.plan("lean")
    assert lean.command[1:3] == ("-m", "tasks.lean") and lean.periodic
    lanes = [lean.command[i + 1].split(",") for i, a in enumerate(lean.command) if a == "--lane"]
    assert sorted(q for lane in lanes for q in lane) == sorted(QUEUE_NAMES)
    assert len(lanes) == len({spec.lane for spec in QUEUES.values()}) < len(QUEUE_NAMES)
    assert "-n" not in lean.command


@pytest.mark.parametrize("mode", ["per-queue", "lean"])
def test_queue_filter_and_no_periodic_leave_periodic_tasks_off(mode):
    plans = workers.plan(mode, ["builder", "long-job"])
    assert sorted(q for item in plans for q in item.queues) == ["builder", "long-job"]
    for item in plans:
        assert not item.periodic and "-n" in item.command
    for item in workers.plan(mode, QUEUE_NAMES, periodic=False):
        assert not item.periodic and "-n" in item.command


def test_the_workers_command_prints_its_plan_on_dry_run(cli):
    result = cli.invoke(args=["workers", "--mode", "per-queue", "--queue", "builder", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == shlex.join(workers.consumer_command("builder"))
    # The line as printed runs (its interpreter named): here, as far as its help.
    shown = shlex.split(result.output)
    assert shown[0] == sys.executable
    helped = subprocess.run([*shown[:3], "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "huey_consumer" in helped.stdout

    bad = cli.invoke(args=["workers", "--mode", "fast"])
    assert bad.exit_code == 2


def systemd_units() -> dict[str, configparser.ConfigParser]:
    units = {}
    for path in sorted(DEPLOY.glob("taskledger-queue-*.service")):
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.optionxform = str
        parser.read(path)
        units[path.name] = parser
    return units


def test_the_systemd_units_match_the_routing_table():
    units = systemd_units()
    served: set[str] = set()
    periodic_units = []
    for name, unit in units.items():
        command = shlex.split(unit["Service"]["ExecStart"])
        module = command[3]
        queue = {f"tasks.consumer.{q.replace('-', '_')}": q for q in QUEUE_NAMES}[module]
        periodic = "-n" not in command
        assert command[1:] == workers.consumer_command(queue, periodic=periodic)[1:], name
        stop_after = int(unit["Service"]["TimeoutStopSec"])
        # The signal goes to the consumer, which stops its workers (one signal each).
        assert unit["Service"]["KillMode"] == "mixed", name
        if QUEUES[queue].stop == "graceful":  # running jobs finish before the stop
            assert unit["Service"]["KillSignal"] == "SIGINT", name
            assert stop_after > QUEUES[queue].max_timeout, name
        else:  # running jobs are handed back at once
            assert QUEUES[queue].stop == "hand-back"
            assert unit["Service"]["KillSignal"] == "SIGTERM", name
            assert 10 <= stop_after < QUEUES[queue].max_timeout, name
        served.add(queue)
        if periodic:
            periodic_units.append((name, queue))
    assert served == set(QUEUE_NAMES)
    assert periodic_units == [("taskledger-queue-default.service", PERIODIC_QUEUE)]


@pytest.mark.workers
def test_lean_mode_serves_short_and_long_queues_with_hard_timeouts(ctx, tmp_path):
    """One lean consumer: a probe run (tasks) and a builder run complete; a timeout is hard."""
    db.session.add(Tenant(id=3, name="Initech"))
    db.session.commit()
    # Queued before the consumer starts: one builder step whose job gets a 1 s timeout.
    slow = stages.start(3, "Slow", lessons=1, quizzes=0, concurrency=1, fake={"latency_ms": 5000})
    slow_step = db.session.execute(
        select(GenerationStep.id).join(GenerationRun).where(GenerationRun.uuid == slow)
    ).scalar_one()
    queues = ctx.extensions["queues"]
    queues.huey("builder").flush()
    step_job = queues.task(stages.STEP_JOB)
    step_job.huey.enqueue(step_job.s(slow_step, timeout=1))

    [lean] = workers.plan("lean", periodic=False)
    log = open(tmp_path / "lean.log", "wb")
    process = subprocess.Popen(
        lean.command,
        cwd=ROOT,
        env=process_env(ctx),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        probe = runner.start("diagnostics.probe", {"units": 6}, "test")
        quick = stages.start(
            3, "Quick", lessons=2, quizzes=1, concurrency=2, fake={"latency_ms": 10}
        )

        def status_of(run_uuid):
            db.session.rollback()
            run = db.session.execute(
                select(GenerationRun).where(GenerationRun.uuid == run_uuid)
            ).scalar_one()
            return run if run.status != "running" else None

        assert wait_for(lambda: status_of(quick), timeout=60).status == "completed"
        failed = wait_for(lambda: status_of(slow), timeout=30)
        assert failed.status == "failed"
        assert failed.failure_reason == (
            "step outline/outline-1 failed: timeout: step ran longer than 1 s"
        )
        wait_for(
            lambda: db.session.rollback() or ledger.runs.get_run(probe.uuid).status != "running",
            timeout=30,
        )
        assert ledger.runs.get_run(probe.uuid).status == "completed"
        # The lean consumer, its scheduler and one worker per lane: nothing else.
        lanes = sum(1 for arg in lean.command if arg == "--lane")
        assert len(process_tree(process.pid)) == 1 + 1 + lanes
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    assert process.returncode == 0, (tmp_path / "lean.log").read_text()[-3000:]
    assert sys.executable == lean.command[0]


@pytest.mark.parametrize("driver", ["sqlite", "redis", "postgres"])
def test_every_queue_is_its_own_huey_in_each_driver_variant(make_app, tmp_path, driver):
    from huey import PostgresHuey, RedisHuey, SqliteHuey

    from tasks.huey_internals import SharedPostgresStorage, _requeue_patiently
    from tests.conftest import BACKEND

    if driver == "postgres" and BACKEND != "postgres":
        pytest.skip("PostgresHuey needs the PostgreSQL ledger (TEST_BACKEND=postgres)")
    # Nothing here may touch a live queue: an unreachable Redis, a scratch SQLite file.
    app = make_app(
        QUEUE_DRIVER=driver,
        REDIS_URL="redis://127.0.0.1:1/0",
        QUEUE_SQLITE_PATH=str(tmp_path / "variant.sqlite3"),
    )
    expected = {"sqlite": SqliteHuey, "redis": RedisHuey, "postgres": PostgresHuey}[driver]
    with app.app_context():
        hueys = app.extensions["queues"].all()
    assert set(hueys) == set(QUEUE_NAMES)
    assert all(type(huey) is expected for huey in hueys.values())
    if driver == "postgres":
        # Every queue of a process on its two connections (tasks.budget).
        assert {type(huey.storage) for huey in hueys.values()} == {SharedPostgresStorage}
    # A dedicated name per queue: its consumer alone decides how its jobs run.
    assert len({huey.name for huey in hueys.values()}) == len(QUEUE_NAMES)
    # A job to retry is put back through an outage of the queue's server.
    assert all(huey._requeue_task.__func__ is _requeue_patiently for huey in hueys.values())


def test_a_unit_job_carries_its_task_types_timeout_on_its_types_queue(ctx):
    definition = registry_of(ctx).get("diagnostics.probe")
    options = definition.options()
    queue = ctx.extensions["queues"].huey(options.queue)
    queue.flush()

    runner.start("diagnostics.probe", {"units": 2}, "test")

    pending = queue.pending()
    assert [task.name.rsplit(".", 2)[-2:] for task in pending] == [["taskrunner", "run_unit"]] * 2
    assert {task.timeout for task in pending} == {options.timeout}
    assert options.timeout != routes.jobs[RUN_UNIT].timeout  # the type's, not the default


def test_a_declared_job_cannot_be_run_inline_by_calling_it(ctx):
    from documents.forwarding import forward_to_provider

    with pytest.raises(TypeError, match="use .enqueue"):
        forward_to_provider("some-document")
    assert jobs.run_step.name == stages.STEP_JOB


def test_a_job_handle_enqueues_on_the_queue_its_route_names(ctx):
    from documents.forwarding import forward

    hueys = ctx.extensions["queues"].all()
    before = {name: huey.pending_count() for name, huey in hueys.items()}
    forward("4f1c2a9e-0000-4000-8000-000000000000")
    after = {name: huey.pending_count() for name, huey in hueys.items()}
    assert {name for name in hueys if after[name] != before[name]} == {"default"}
    (task,) = [t for t in hueys["default"].pending() if t.name == "documents.forward_to_provider"]
    assert task.args == ("4f1c2a9e-0000-4000-8000-000000000000",)


def test_one_routing_decision_serves_dispatch_revoke_and_the_queues_page(make_app):
    """The queue a type's units run on is decided once: the routing table's lane for the
    vendor probe, a deployment's route for the probe, and the page agrees with both."""
    from taskrunner import console
    from taskrunner.dispatch import task_id

    app = make_app(TASK_RUNNER_TYPE_ROUTES="diagnostics.probe=long-job")
    with app.app_context():
        hueys = app.extensions["queues"].all()
        for huey in hueys.values():
            huey.flush()
        handle = runner.start("diagnostics.probe", {"units": 2}, "test")
        runner.start("diagnostics.vendor_probe", {"units": 1}, "test")
        assert {
            name: huey.pending_count() for name, huey in hueys.items() if huey.pending_count()
        } == {
            "long-job": 2,
            "io": 1,
        }

        filed = {
            t["type"]: queue["name"] for queue in console.queues()["queues"] for t in queue["types"]
        }
        assert filed["diagnostics.probe"] == "long-job"
        assert filed["diagnostics.vendor_probe"] == "io"

        runner.cancel(handle.uuid)
        tokens = [
            (u.id, u.dispatch_token)
            for u in db.session.execute(
                select(TaskRunUnit).join(TaskRun).where(TaskRun.uuid == handle.uuid)
            ).scalars()
        ]
        assert all(hueys["long-job"].is_revoked(task_id(*pair)) for pair in tokens)
