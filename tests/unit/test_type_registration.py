"""A task type is checked when it is registered: its queue exists, and its stuck threshold
is above its job timeout (SPEC §10), or its live units would be recovered as stuck."""

from __future__ import annotations

import pytest

from config import ConfigError
from taskrunner.contract import TaskOptions, register
from taskrunner.registry import registry
from tests.factories import ControlledTask
from tests.unit.test_config_errors import assert_one_error_line, run


class Declared(ControlledTask):
    def __init__(self, type_: str, **options) -> None:
        super().__init__(type_)
        self.declared = options

    def options(self) -> TaskOptions:
        return TaskOptions(**self.declared)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"stuck_after_minutes": 5, "timeout": 600}, "stuck_after_minutes (5) must be above"),
        ({"stuck_after_minutes": 10, "timeout": 600}, "stuck_after_minutes (10) must be above"),
        # No threshold of its own: TASK_RUNNER_STUCK_AFTER_MINUTES (60) is its threshold.
        (
            {"queue": "long-job", "timeout": 3600},
            "stuck_after_minutes (60) must be above its timeout (3600 s)",
        ),
        ({"queue": "i0", "timeout": 60}, "queue 'i0' is not one of default, tasks, builder"),
        ({"queue": "q" * 600, "timeout": 60}, "queue 'qqqq"),
        # The builder queue's consumer is stopped gracefully and waits 1,800 s at most: a
        # longer job is killed by the deploy's stop, its unit found only as worker lost.
        (
            {"queue": "builder", "stuck_after_minutes": 120, "timeout": 3600},
            "timeout (3600 s) must be 1 to 1800 s, the longest its queue (builder) serves",
        ),
        ({"timeout": 0}, "timeout (0 s) must be 1 to 900 s, the longest its queue (tasks)"),
    ],
)
def test_a_type_that_breaks_the_rules_is_refused_at_registration_naming_it(ctx, options, named):
    with pytest.raises(ConfigError) as refused:
        register(Declared("deploy.report", **options))

    message = refused.value.format_message()
    assert message.startswith("task type 'deploy.report': ") and named in message
    assert len(message) < 300
    assert registry.find("deploy.report") is None


@pytest.mark.parametrize(
    "options",
    [
        {"stuck_after_minutes": 11, "timeout": 600},
        {"queue": "long-job", "timeout": 3599},
        {"queue": "builder", "stuck_after_minutes": 31, "timeout": 1800},
        {"queue": "long-job", "stuck_after_minutes": 400, "timeout": 18000},
    ],
)
def test_a_type_within_the_rules_registers(ctx, options):
    register(Declared("deploy.report", **options))

    assert registry.find("deploy.report") is not None


def test_a_deployments_module_with_such_a_type_stops_the_cli_in_one_line(tmp_path):
    done = run(
        ["-m", "flask", "--app", "app", "tasks", "status"],
        tmp_path,
        TASKLEDGER_EXTRA_MODULES="tests.misdeclared_types",
    )

    assert_one_error_line(
        done, "task type 'deploy.nightly_export'", "stuck_after_minutes (5)", "(600 s)"
    )


def test_a_type_registered_twice_is_refused_and_the_first_definition_kept(ctx):
    # A deployment's module naming its type as one of the project's silently replaced it:
    # every run of the project's type then ran the deployment's jobs.
    project = registry.find("diagnostics.probe")
    assert project is not None

    with pytest.raises(ConfigError) as refused:
        register(Declared("diagnostics.probe", timeout=60))

    assert refused.value.format_message() == (
        "task type 'diagnostics.probe' is registered twice (each type once, by one module)"
    )
    assert registry.find("diagnostics.probe") is project


def test_a_type_routed_to_another_queue_is_checked_against_that_queues_limit(make_app):
    # The io lane serves 900 s at most: a route there of a 1,200 s type would be cut short.
    app = make_app(TASK_RUNNER_TYPE_ROUTES="deploy.report=io")
    with app.app_context(), pytest.raises(ConfigError, match=r"its queue \(io\)"):
        register(Declared("deploy.report", queue="long-job", timeout=1200))


@pytest.mark.parametrize("type_", ["", "t" * 121, "deploy report", "deploy.\x1b[2Jreport"])
def test_a_type_name_no_run_row_can_hold_is_refused_at_registration(ctx, type_):
    # task_runs.type holds 120 characters: on PostgreSQL every start of a longer type
    # failed at its insert, a database error instead of the module's mistake.
    with pytest.raises(ConfigError) as refused:
        register(Declared(type_, timeout=60))

    message = refused.value.format_message()
    assert message.startswith("a task type is a name of 1 to 120 characters")
    assert "\x1b" not in message and len(message) < 300
    assert registry.find(type_) is None
