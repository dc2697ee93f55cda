"""A setting the process cannot run with is one ``error:`` line naming it, never a traceback."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from sqlalchemy import select

from config import (
    MAX_PERIOD_HOURS,
    MAX_PERIOD_MINUTES,
    MAX_PERIOD_SECONDS,
    Config,
    ConfigError,
)
from extensions import db
from harness import ROOT
from taskrunner import console, runner
from taskrunner.dispatch import queue_of
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun
from tasks.presence import Board, Presence


def run(args: list[str], tmp_path, **settings: str) -> subprocess.CompletedProcess:
    """``python args…`` from the project root, as an operator's shell would run it, with a
    fresh instance folder and log file under ``tmp_path`` and ``settings`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        INSTANCE_PATH=str(tmp_path / "instance"),
        LOG_FILE=str(tmp_path / "cli.log"),
        PYTHONPATH=str(ROOT),
    )
    env.update(settings)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_error_line(done: subprocess.CompletedProcess, *named: str) -> None:
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: "), line
    for part in named:
        assert part in line, line


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("TASK_RUNNER_RETENTION_DAYS", "1e3", "must be a whole number, got '1e3'"),
        ("ALERT_STALE_UNITS", "abc", "must be a whole number, got 'abc'"),
        ("ALERT_STALE_MINUTES", "ten", "must be a number, got 'ten'"),
        ("SESSION_COOKIE_SECURE", "yes", "must be 0 or 1, got 'yes'"),
        ("LOG_LEVEL", "LOUD", "'LOUD'"),
        ("QUEUE_DRIVER", "nope", "must be sqlite, redis or postgres, got 'nope'"),
        ("SMTP_SECURITY", "tls", "must be none, starttls or ssl, got 'tls'"),
        # Found by a build's first step, each build was started, then failed.
        ("LLM_DRIVER", "openai", "must be fake or http, got 'openai'"),
        ("LLM_DRIVER", "http", "LLM_BASE_URL must be set when LLM_DRIVER is http"),
        ("ALERT_QUEUE_WAIT_MINUTES", "*=nan", "'*=nan' is not a number of minutes"),
        ("DATABASE_URL", "notaurl", "is not a database URL"),
        ("DATABASE_URL", "foo://db", "sqlalchemy.dialects:foo"),
        ("TASKLEDGER_EXTRA_MODULES", "nowhere.tasks", "'nowhere.tasks'"),
        ("TASK_RUNNER_TYPE_ROUTES", "x.sync=nowhere", "'x.sync=nowhere' names no queue"),
    ],
)
def test_a_bad_setting_is_one_error_line_naming_it_and_exit_1_in_the_cli(
    tmp_path, setting, value, named
):
    done = run(["-m", "flask", "--app", "app", "tasks", "status"], tmp_path, **{setting: value})

    assert_one_error_line(done, setting, named)


@pytest.mark.parametrize("asked", [["--help"], ["tasks", "--help"]])
def test_a_bad_setting_is_one_error_line_and_exit_1_when_the_cli_lists_its_commands(
    tmp_path, asked
):
    done = run(["-m", "flask", "--app", "app", *asked], tmp_path, ALERT_STALE_UNITS="abc")

    assert_one_error_line(done, "ALERT_STALE_UNITS must be a whole number, got 'abc'")


def test_a_log_file_that_cannot_be_written_is_one_error_line_naming_log_file(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()

    done = run(["-m", "flask", "--app", "app", "tasks", "status"], tmp_path, LOG_FILE=str(folder))

    assert_one_error_line(done, "LOG_FILE", repr(str(folder)))


def test_a_database_url_that_does_not_parse_is_not_repeated_in_the_error(tmp_path):
    done = run(
        ["-m", "flask", "--app", "app", "tasks", "status"],
        tmp_path,
        DATABASE_URL="postgres ql://ops:hunter2-secret@db/ledger",
    )

    assert_one_error_line(done, "DATABASE_URL")
    assert "hunter2-secret" not in done.stderr


@pytest.mark.parametrize("entry", ["wsgi", "tasks.consumer"])
def test_the_web_and_consumer_entry_modules_refuse_a_bad_setting_on_one_line(tmp_path, entry):
    done = run(["-c", f"import {entry}"], tmp_path, ALERT_STALE_UNITS="abc")

    assert_one_error_line(done, "ALERT_STALE_UNITS must be a whole number, got 'abc'")


@pytest.mark.parametrize(
    ("setting", "value"),
    [("CONSUMER_RETENTION_MINUTES", "100000000000000"), ("CONSUMER_HEARTBEAT_SECONDS", "1e300")],
)
def test_a_consumer_refuses_a_period_beyond_a_century_on_one_line(tmp_path, setting, value):
    from tasks.workers import consumer_command

    done = run(consumer_command("tasks", workers=1)[1:], tmp_path, **{setting: value})

    assert_one_error_line(done, f"{setting} must be at most")


def test_a_consumer_refuses_a_heartbeat_that_would_beat_without_pause_on_one_line(tmp_path):
    from tasks.workers import consumer_command

    done = run(
        consumer_command("tasks", workers=1)[1:], tmp_path, CONSUMER_HEARTBEAT_SECONDS="1e-6"
    )

    assert_one_error_line(done, "CONSUMER_HEARTBEAT_SECONDS must be at least 0.1, got '1e-6'")


def test_the_consumers_longest_periods_are_taken_and_a_consumer_beats_with_them(
    make_app, monkeypatch
):
    monkeypatch.setenv("CONSUMER_RETENTION_MINUTES", str(MAX_PERIOD_MINUTES))
    # The longest beat the longest retention takes: it must outlast three beats.
    monkeypatch.setenv("CONSUMER_HEARTBEAT_SECONDS", str(MAX_PERIOD_SECONDS // 4))
    config = Config()
    app = make_app(
        CONSUMER_RETENTION_MINUTES=config.CONSUMER_RETENTION_MINUTES,
        CONSUMER_HEARTBEAT_SECONDS=config.CONSUMER_HEARTBEAT_SECONDS,
    )
    with app.app_context():
        presence = Presence(app, ["tasks"], "thread", 1, Board(2))
        presence.beat()
        assert [c["state"] for c in console.consumers()["consumers"]] == ["live"]
        presence.stop()


def test_the_runners_longest_periods_are_taken_and_its_sweeps_run_with_them(
    make_app, monkeypatch, controlled
):
    for setting, longest in (
        ("TASK_RUNNER_STUCK_AFTER_MINUTES", MAX_PERIOD_MINUTES),
        ("TASK_RUNNER_HEARTBEAT_SECONDS", MAX_PERIOD_SECONDS),
        ("TASK_RUNNER_NEVER_STARTED_SECONDS", MAX_PERIOD_SECONDS),
        ("TASK_RUNNER_RETRY_HORIZON_HOURS", MAX_PERIOD_HOURS),
    ):
        monkeypatch.setenv(setting, str(longest))
    config = Config()
    app = make_app(
        **{name: getattr(config, name) for name in dir(config) if name.startswith("TASK_RUNNER_")}
    )
    with app.app_context():
        handle = runner.start(controlled.type(), {"units": 2}, "test")
        cli = app.test_cli_runner()
        for args in (
            ["tasks", "detect-stuck"],
            ["tasks", "status"],
            ["tasks", "status", handle.uuid],
        ):
            done = cli.invoke(args=args)
            assert done.exit_code == 0, done.output
        assert runner.retry(handle.uuid) == 2


def test_the_config_readers_name_the_variable_and_what_it_must_be(monkeypatch):
    for setting, value, expected in (
        ("TASK_RUNNER_RETENTION_DAYS", "1e3", "must be a whole number, got '1e3'"),
        ("LIVE_POLL_SECONDS", "nan", "must be a number, got 'nan'"),
        ("SESSION_COOKIE_SECURE", "true", "must be 0 or 1, got 'true'"),
        ("LOG_LEVEL", "LOUD", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("QUEUE_DRIVER", "Redis", "must be sqlite, redis or postgres, got 'Redis'"),
        ("SMTP_SECURITY", "STARTTLS", "must be none, starttls or ssl, got 'STARTTLS'"),
        ("TASK_RUNNER_RETENTION_DAYS", "-1", "must be at least 0, got '-1'"),
        # A cut-off before year 1: every prune, of runs and of alerts, failed on it.
        ("TASK_RUNNER_RETENTION_DAYS", "1000000", "must be at most 36500, got '1000000'"),
        ("ASYNC_REQUESTS_RETENTION_DAYS", "36501", "must be at most 36500, got '36501'"),
        ("TASK_RUNNER_SWEEP_SECONDS", "0", "must be at least 1, got '0'"),
        ("TASK_RUNNER_DISPATCH_CHUNK", "0", "must be at least 1, got '0'"),
        ("ALERT_STALE_MINUTES", "-5", "must not be negative, got '-5'"),
        # A period at zero spins its loop, and makes every unit and consumer look lost.
        ("TASK_RUNNER_HEARTBEAT_SECONDS", "0", "must be at least 1, got '0'"),
        ("CONSUMER_HEARTBEAT_SECONDS", "0", "must be more than 0, got '0'"),
        # Taken, it made each consumer's beat a loop of upserts with no pause in it.
        ("CONSUMER_HEARTBEAT_SECONDS", "0.000001", "must be at least 0.1, got '0.000001'"),
        # A consumer's presence failed to start on them (a timedelta out of range), or never
        # registered (a cut-off before year 1): no consumer shown, every beat an error.
        ("CONSUMER_RETENTION_MINUTES", "100000000000000", "must be at most 52560000, got"),
        ("CONSUMER_RETENTION_MINUTES", "1100000000", "must be at most 52560000, got"),
        ("CONSUMER_HEARTBEAT_SECONDS", "1e300", "must be at most 3.1536e\\+09, got '1e300'"),
        # The stuck sweep, tasks status and the stale pages failed on each (OverflowError).
        ("TASK_RUNNER_STUCK_AFTER_MINUTES", "100000000000000", "must be at most 52560000"),
        ("TASK_RUNNER_HEARTBEAT_SECONDS", "100000000000000", "must be at most 3153600000"),
        ("TASK_RUNNER_NEVER_STARTED_SECONDS", "1" + "0" * 16, "must be at most 3153600000"),
        ("TASK_RUNNER_RETRY_HORIZON_HOURS", "1e300", "must be at most 876000, got '1e300'"),
        ("LIVE_POLL_SECONDS", "0.0", "must be more than 0, got '0.0'"),
        ("TASK_RUNNER_EVENT_RETRY_SECONDS", "0", "must be more than 0, got '0'"),
        ("TASK_RUNNER_RETRY_HORIZON_HOURS", "0", "must be more than 0, got '0'"),
        ("SESSION_LIFETIME_HOURS", "0", "must be more than 0, got '0'"),
        ("DOCUMENTS_PROVIDER_TIMEOUT_SECONDS", "0", "must be more than 0, got '0'"),
        ("ALERT_TIMEOUT_SECONDS", "0", "must be more than 0, got '0'"),
        # Taken, each send of every channel failed on it (OverflowError, a thread's traceback).
        ("ALERT_TIMEOUT_SECONDS", "1e10", "must be at most 60, got '1e10'"),
        # Taken, each email went to another port, or failed on it (OverflowError).
        ("SMTP_PORT", "70000", "must be at most 65535, got '70000'"),
        # Taken, each call to the model or the provider failed on it (OverflowError), and
        # a wait past the step's or the forward's own timeout is cut by it anyway.
        ("LLM_TIMEOUT_SECONDS", "10000000000", "must be at most 1800, got '10000000000'"),
        ("DOCUMENTS_PROVIDER_TIMEOUT_SECONDS", "1e10", "must be at most 60, got '1e10'"),
        # A socket timeout of 0 is a non-blocking socket: every call to the model failed.
        ("LLM_TIMEOUT_SECONDS", "0", "must be at least 1, got '0'"),
        # A stale threshold of 0 made every unit of every type stale as it was dispatched.
        ("TASK_RUNNER_STUCK_AFTER_MINUTES", "0", "must be at least 1, got '0'"),
        ("ALERT_RUN_FAILED_MIN_SHARE", "2", "must be a share from 0 to 1, got 2"),
        ("ALERT_WEBHOOK_URL", "https://bot:Pw-1@hooks.example.test/x", "must not carry a user"),
        ("LLM_BASE_URL", "https://llm:Pw-1@llm.example.test/v1", "must not carry a user"),
        # Each document's attempts failed on it instead, five times over, as if the
        # provider were down ("provider broke off the exchange (InvalidURL)").
        ("DOCUMENTS_PROVIDER_URL", "https://d:Pw-1@docs.example.test", "must not carry a user"),
        ("DOCUMENTS_PROVIDER_URL", "https://docs.example.test:abc/", "is not a URL with a"),
        ("DOCUMENTS_PROVIDER_URL", "https://[::1/", "is not a URL with a"),
        ("ALERT_SLACK_WEBHOOK_URL", "https://hooks.example.test:Pw-1/x", "is not a URL with a"),
        # urllib opens these too: a local file's contents passed for the provider's answer.
        ("DOCUMENTS_PROVIDER_URL", "file:///srv/provider", "must be an http or https URL"),
        ("DOCUMENTS_PROVIDER_URL", "ftp://docs.example.test/in", "must be an http or https URL"),
        ("DOCUMENTS_PROVIDER_URL", "docs.example.test/v1", "must be an http or https URL"),
        ("LLM_BASE_URL", "file:///srv/llm/v1", "must be an http or https URL"),
        ("LLM_BASE_URL", "https:///v1", "must be an http or https URL with a host"),
        ("ALERT_WEBHOOK_URL", "data:text/plain,ok", "must be an http or https URL"),
        ("ALERT_SLACK_WEBHOOK_URL", "gopher://hooks.example.test/x", "must be an http or"),
    ):
        with monkeypatch.context() as patched:
            patched.setenv(setting, value)
            with pytest.raises(ConfigError, match=f"^{setting} {expected}"):
                Config()


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("ALERT_RUN_FAILED_TYPES", "x.sync=1:nan", "'x.sync=1:nan' is not units[:share]"),
        ("ALERT_RUN_FAILED_TYPES", "x.sync=1:inf", "'x.sync=1:inf' is not units[:share]"),
        ("ALERT_RUN_FAILED_TYPES", "x.sync=-2", "'x.sync=-2' is not units[:share]"),
        # A share over 1 is reached by no run: that type's alerts would be off.
        ("ALERT_RUN_FAILED_TYPES", "x.sync=1:2", "'x.sync=1:2' is not units[:share]"),
        ("ALERT_QUEUE_WAIT_MINUTES", "*=nan", "'*=nan' is not a number of minutes (0: off)"),
        ("ALERT_QUEUE_WAIT_MINUTES", "tasks=-5", "'tasks=-5' is not a number of minutes"),
        ("ALERT_QUEUE_WAIT_MINUTES", "tasks=inf", "'tasks=inf' is not a number of minutes"),
        ("ALERT_ROUTES", "run_failed=pager", "unknown channel 'pager'"),
    ],
)
def test_an_alert_list_setting_that_would_turn_alerts_off_unsaid_is_refused(
    monkeypatch, setting, value, expected
):
    monkeypatch.setenv(setting, value)

    with pytest.raises(ConfigError, match=f"^{setting}: {re.escape(expected)}"):
        Config()


@pytest.mark.parametrize(("heartbeat", "retention"), [("10", "0"), ("30", "1"), ("20", "1")])
def test_a_consumer_retention_that_forgets_consumers_before_they_look_lost_is_refused(
    monkeypatch, heartbeat, retention
):
    # At 0 every beat deleted every other consumer's row, live ones too; below three beats
    # a dead consumer was forgotten before it was ever shown lost (no consumer_lost alert).
    monkeypatch.setenv("CONSUMER_HEARTBEAT_SECONDS", heartbeat)
    monkeypatch.setenv("CONSUMER_RETENTION_MINUTES", retention)

    with pytest.raises(ConfigError, match="^CONSUMER_RETENTION_MINUTES must be longer than"):
        Config()


def test_a_consumer_retention_longer_than_three_beats_is_taken(monkeypatch):
    monkeypatch.setenv("CONSUMER_HEARTBEAT_SECONDS", "19.5")
    monkeypatch.setenv("CONSUMER_RETENTION_MINUTES", "1")

    assert Config().CONSUMER_RETENTION_MINUTES == 1


@pytest.mark.parametrize("poll", ["10.5", "30", "60"])
def test_a_live_poll_longer_than_a_streams_lease_allows_is_refused(monkeypatch, poll):
    # A stream renews its lease only at a poll: polling every 30 s or more, its lease
    # lapsed while it was open, the next tab's admission deleted it, and one session held
    # more streams than its cap (and a client gone or a sign-out went unseen that long).
    monkeypatch.setenv("LIVE_POLL_SECONDS", poll)

    with pytest.raises(ConfigError, match=f"^LIVE_POLL_SECONDS must be at most 10, got '{poll}'"):
        Config()


def test_the_longest_live_poll_still_renews_a_lease_before_it_lapses(monkeypatch):
    from config import LIVE_POLL_MAX_SECONDS
    from live import streams

    monkeypatch.setenv("LIVE_POLL_SECONDS", str(LIVE_POLL_MAX_SECONDS))

    assert Config().LIVE_POLL_SECONDS == LIVE_POLL_MAX_SECONDS
    # Renewed at the first poll at least RENEW_SECONDS after the last renewal.
    assert streams.RENEW_SECONDS + LIVE_POLL_MAX_SECONDS < streams.LEASE_SECONDS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Every run of the type was written, then failed "dispatch failed: unknown queue".
        (
            "diagnostics.probe=nowhere",
            "'diagnostics.probe=nowhere' names no queue (default, tasks, builder, long-job or io)",
        ),
        ("x.sync=IO", "'x.sync=IO' names no queue"),
        ("x.sync=io=tasks", "'x.sync=io=tasks' names no queue"),
        # Ignored unsaid: the type stayed on its own queue.
        ("x.sync", "'x.sync' is not type=queue"),
        ("x.sync=io, =tasks", "'=tasks' is not type=queue"),
    ],
)
def test_a_type_route_to_no_queue_is_refused_when_the_app_is_built(make_app, value, expected):
    with pytest.raises(ConfigError, match=f"^TASK_RUNNER_TYPE_ROUTES: {re.escape(expected)}"):
        make_app(TASK_RUNNER_TYPE_ROUTES=value)


@pytest.mark.parametrize("entry", ["wsgi", "tasks.consumer"])
def test_the_web_and_consumers_refuse_a_type_route_to_no_queue_on_one_line(tmp_path, entry):
    done = run(["-c", f"import {entry}"], tmp_path, TASK_RUNNER_TYPE_ROUTES="x.sync=nowhere")

    assert_one_error_line(done, "TASK_RUNNER_TYPE_ROUTES: 'x.sync=nowhere' names no queue")


def test_a_type_route_with_spaces_and_an_empty_entry_is_taken(make_app):
    app = make_app(TASK_RUNNER_TYPE_ROUTES=" diagnostics.probe = long-job , ,")

    with app.app_context():
        assert queue_of("diagnostics.probe") == "long-job"


def test_a_zero_that_means_off_or_now_is_still_taken(monkeypatch):
    for setting in (
        "TASK_RUNNER_NEVER_STARTED_SECONDS",
        "ALERT_REMIND_MINUTES",
        "TRUSTED_PROXY_HOPS",
    ):
        monkeypatch.setenv(setting, "0")

    config = Config()

    assert config.TASK_RUNNER_NEVER_STARTED_SECONDS == 0 and config.ALERT_REMIND_MINUTES == 0
    assert config.TRUSTED_PROXY_HOPS == 0


def test_a_log_level_in_lower_case_is_the_same_level(monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "debug")

    assert Config().LOG_LEVEL == "DEBUG"


def test_gunicorns_master_stops_on_a_bad_setting_with_one_error_line(tmp_path):
    done = run(
        ["-m", "gunicorn", "-c", "gunicorn.conf.py", "-b", "127.0.0.1:0", "wsgi:app"],
        tmp_path,
        TASK_RUNNER_RETENTION_DAYS="1e3",
    )

    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if "Traceback" in line or "error" in line]
    assert errors == ["error: TASK_RUNNER_RETENTION_DAYS must be a whole number, got '1e3'"]


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("WEB_WORKERS", "abc", "must be a whole number, got 'abc'"),
        ("WEB_WORKERS", "0", "must be at least 1, got '0'"),
        ("WEB_THREADS", "8.5", "must be a whole number, got '8.5'"),
    ],
)
def test_gunicorn_refuses_its_own_bad_numbers_with_one_error_line(tmp_path, setting, value, named):
    # They were read by a bare int(): a traceback, or a server with no worker at all.
    done = run(
        ["-m", "gunicorn", "-c", "gunicorn.conf.py", "-b", "127.0.0.1:0", "wsgi:app"],
        tmp_path,
        **{setting: value},
    )

    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"error: {setting} {named}"]


def test_a_config_error_quoting_a_line_break_or_an_escape_is_still_one_line():
    shown = io.StringIO()
    ConfigError("LOG_FILE: cannot write 'a\nb' (\x1b[2J)").show(shown)
    assert shown.getvalue() == "error: LOG_FILE: cannot write 'a\\nb' (\\x1b[2J)\n"


def test_a_consumer_refuses_a_queue_file_it_cannot_open_on_one_line(tmp_path):
    from tasks.workers import consumer_command

    folder = tmp_path / "a-folder"
    folder.mkdir()

    done = run(consumer_command("tasks", workers=1)[1:], tmp_path, QUEUE_SQLITE_PATH=str(folder))

    assert_one_error_line(done, f"QUEUE_SQLITE_PATH: cannot open the queue file {str(folder)!r}")


def test_a_run_sent_to_a_queue_file_that_cannot_be_made_names_the_setting(make_app, tmp_path):
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("")
    # A SQLite queue file on either ledger database (the PostgreSQL pass queues on Redis).
    app = make_app(QUEUE_DRIVER="sqlite", QUEUE_SQLITE_PATH=str(tmp_path / "queue.sqlite3"))
    usable = app.config["QUEUE_SQLITE_PATH"]
    app.config["QUEUE_SQLITE_PATH"] = str(not_a_folder / "queue.sqlite3")

    try:
        with app.app_context():
            done = app.test_cli_runner().invoke(
                args=["tasks", "start", "diagnostics.probe", "--context", '{"units": 1}']
            )
            assert done.exit_code == 1
            [line] = done.output.splitlines()
            assert line.startswith("error: dispatch failed: QUEUE_SQLITE_PATH: cannot open"), line
            [run] = db.session.execute(select(TaskRun)).scalars()
            [unit] = ledger.runs.run_units_page(run).items
            reason = unit["last_error"]
            assert reason.startswith("dispatch failed: QUEUE_SQLITE_PATH: cannot open"), reason
    finally:
        app.config["QUEUE_SQLITE_PATH"] = usable  # the test's queues are emptied after it


def test_a_vendors_longest_wait_is_its_jobs_own_timeout():
    from config import MAX_LLM_TIMEOUT_SECONDS, MAX_PROVIDER_TIMEOUT_SECONDS
    from coursebuilder.steps import STEP_TIMEOUT
    from documents.forwarding import FORWARD
    from tasks.routing import routes

    assert (MAX_LLM_TIMEOUT_SECONDS, MAX_PROVIDER_TIMEOUT_SECONDS) == (
        STEP_TIMEOUT,
        routes.jobs[FORWARD].timeout,
    )
