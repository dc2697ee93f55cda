"""The app factory: each app holds its own runner state, and building one writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from taskrunner import events, tenant_scope
from taskrunner.contract import bind_tenant_context, register, subscribe
from taskrunner.redaction import scrub
from taskrunner.registry import registry, registry_of
from tests.factories import ControlledTask
from tests.support import ROOT


def test_two_apps_in_one_process_share_no_runner_state(make_app):
    first, second = make_app(), make_app()
    entered = []
    with first.app_context():
        register(ControlledTask("tests.first_only"))
        subscribe("tasks.run.completed", entered.append)
        bind_tenant_context(entered.append, lambda: None)

    with second.app_context():
        assert registry.find("tests.first_only") is None
        # The project's own subscribers (the alerts') are every app's; this one is not.
        assert entered.append not in events.subscribers("tasks.run.completed").values()
        with tenant_scope.tenant(7):
            assert entered == []
    with first.app_context():
        assert registry.find("tests.first_only") is not None
        assert entered.append in events.subscribers("tasks.run.completed").values()
        with tenant_scope.tenant(7):
            assert entered == [7]


def test_every_app_binds_its_own_scrubber_and_registers_the_projects_types(make_app):
    for app in (make_app(), make_app()):
        assert "diagnostics.probe" in registry_of(app).types()
        with app.app_context():
            assert scrub("ssn 123-45-6789") == "ssn [ssn]"


def test_the_instance_path_comes_from_the_config_of_each_app(make_app, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert make_app(INSTANCE_PATH=str(one)).instance_path == str(one)
    assert make_app(INSTANCE_PATH=str(two)).instance_path == str(two)


FRESH_PROCESS = """
import json, logging, os, sys
from app import create_app

root = logging.getLogger()
before = (list(root.handlers), root.level, logging.getLogRecordFactory(), sys.excepthook)
app = create_app()
after = (list(root.handlers), root.level, logging.getLogRecordFactory(), sys.excepthook)
with app.app_context():
    pass
print(json.dumps({
    "instance_path": app.instance_path,
    "database": app.config["SQLALCHEMY_DATABASE_URI"],
    "logging_untouched": before == after,
    "secret_key": app.config["SECRET_KEY"],
    "imported": [name for name in ("alembic", "httpx", "urllib3") if name in sys.modules],
}))
"""


def fresh_process(env: dict[str, str], cwd) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def clean_env(**extra: str) -> dict[str, str]:
    prefixes = ("PYTEST", "DATABASE_", "QUEUE_", "REDIS_", "LOG_", "SECRET_", "INSTANCE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    return env | {"PYTHONPATH": str(ROOT), **extra}


def test_building_an_app_writes_nothing_and_leaves_logging_alone(tmp_path):
    instance = tmp_path / "instance"  # not there yet: nothing may make it

    found = fresh_process(clean_env(INSTANCE_PATH=str(instance)), cwd=tmp_path)

    assert found["instance_path"] == str(instance)
    assert found["database"] == f"sqlite:///{instance / 'taskledger.db'}"
    assert found["logging_untouched"]
    assert found["secret_key"] is None
    assert not instance.exists()
    assert list(tmp_path.iterdir()) == [], "the factory wrote into its working directory"


def test_an_app_imports_neither_the_migration_tool_nor_http_clients_it_does_not_use(tmp_path):
    # Their imports were a fifth of the start of every consumer, command and web worker;
    # ``flask db upgrade`` still runs (the test below), their errors are still vendor errors
    # (tests/unit/test_failure_kinds.py).
    found = fresh_process(clean_env(INSTANCE_PATH=str(tmp_path / "instance")), cwd=tmp_path)

    assert found["imported"] == []


def test_a_flask_command_makes_the_instance_key_once_and_the_next_app_reads_it(tmp_path):
    """``make migrate`` (``flask db upgrade``) is the step that makes it for ``make run``."""
    instance = tmp_path / "instance"
    env = clean_env(INSTANCE_PATH=str(instance))
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "flask", "--app", "app", "db", "upgrade"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    key = (instance / "secret_key").read_text().strip()
    assert len(key) == 64

    assert fresh_process(env, cwd=tmp_path)["secret_key"] == key


def test_a_deployments_own_modules_register_their_types_in_every_app_the_factory_builds(
    make_app,
):
    """``TASKLEDGER_EXTRA_MODULES`` is the factory's: the web, the CLI and the consumers
    (which all build the app with it) know the same task types."""
    app = make_app(TASKLEDGER_EXTRA_MODULES="tests.ops_types")
    assert {"ops.slow", "ops.throttled"} <= set(registry_of(app).types())

    started = app.test_cli_runner().invoke(
        args=["tasks", "start", "ops.slow", "--context", '{"units": 0}']
    )
    assert started.exit_code == 0, started.output
    assert "ops.slow" not in registry_of(make_app()).types()


def test_a_deployments_module_that_cannot_be_imported_is_named(make_app):
    with pytest.raises(ValueError, match="TASKLEDGER_EXTRA_MODULES: cannot import 'nowhere.tasks'"):
        make_app(TASKLEDGER_EXTRA_MODULES="tests.ops_types, nowhere.tasks")
