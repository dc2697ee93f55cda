"""Operator emails are real addresses; the embedded files are private to their owner.

Item 11 of the security review: ``flask users create`` refused anything with an
"@" as an email no more, and the database, queue, log and key files of the
instance folder are created 0600 (the folder 0700, an existing one tightened) under
the usual umask.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.support import ROOT

PASSWORD = "a long enough password\n"


@pytest.mark.parametrize(
    "email",
    [
        "a b@example.com",
        "ops@example",
        "@example.com",
        "ops@",
        "ops@@example.com",
        "ops@exa mple.com",
        "ops@-example.com",
        "ops@example..com",
        ".ops@example.com",
        "op..s@example.com",
        "ops@example.com\nx",
        "<script>@example.com",
        "ops\x00@example.com",
        "o" * 65 + "@example.com",
        "ops@" + "e" * 190 + ".com",
    ],
)
def test_users_create_refuses_what_is_not_an_email_address(cli, email):
    result = cli.invoke(args=["users", "create", email], input=PASSWORD)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not an email address: ")
    assert len(result.stderr.splitlines()) == 1
    assert len(result.stderr) < 120


@pytest.mark.parametrize(
    "email", ["ops@example.com", "first.last+tag@sub.example.co.uk", "o'brien@example.org"]
)
def test_users_create_accepts_real_addresses(cli, email):
    result = cli.invoke(args=["users", "create", email], input=PASSWORD)
    assert result.exit_code == 0, result.output


def flask(instance, *args: str, **settings: str) -> subprocess.CompletedProcess:
    return python(instance, "-m", "flask", "--app", "app", *args, **settings)


def python(instance, *args: str, **settings: str) -> subprocess.CompletedProcess:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST", "DATABASE_", "QUEUE_", "REDIS_", "LOG_", "SECRET_"))
    }
    env |= {"INSTANCE_PATH": str(instance), "PYTHONPATH": str(ROOT), **settings}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        # The usual umask, which makes new files world-readable unless created otherwise.
        preexec_fn=lambda: os.umask(0o022),
    )


def test_the_embedded_database_queue_log_and_key_are_private_files_in_a_private_folder(
    tmp_path,
):
    instance = tmp_path / "instance"
    # A folder an older version (or the usual umask) left open to everyone is tightened.
    instance.mkdir()
    instance.chmod(0o755)
    # A log an older version left readable by everyone is tightened, its lines kept.
    log = instance / "taskledger.log"
    log.write_text("old lines\n")
    log.chmod(0o644)

    probe = ("tasks", "start", "diagnostics.probe", "--context", '{"units": 1}')
    for args in [("db", "upgrade"), probe]:
        result = flask(instance, *args)
        assert result.returncode == 0, result.stderr

    files = sorted(path for path in instance.rglob("*") if path.is_file())
    names = {path.name for path in files}
    assert {"taskledger.db", "queue.sqlite3", "taskledger.log", "secret_key"} <= names, names
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in files}
    assert modes == {name: 0o600 for name in modes}
    assert stat.S_IMODE(instance.stat().st_mode) == 0o700
    assert log.read_text().startswith("old lines\n")


def test_a_file_path_that_names_a_pipe_or_a_device_keeps_its_mode(tmp_path):
    # ``LOG_FILE=/dev/null`` went through here and left /dev/null 0600: every other
    # account of the machine (PostgreSQL's among them) could no longer open it. A pipe
    # takes the same path as a device, without touching the machine's own.
    from security.files import private_file

    pipe = tmp_path / "log-pipe"
    os.mkfifo(pipe)
    os.chmod(pipe, 0o666)  # whatever the umask

    assert private_file(pipe) == pipe
    assert stat.S_IMODE(pipe.stat().st_mode) == 0o666


# A file of another program, named by mistake (as root, ``LOG_FILE=/etc/passwd`` left the
# machine's accounts file 0600, and the log would have been appended to it).
FOREIGN = "root:x:0:0:root:/root:/bin/bash\n"


def foreign_file(path):
    path.write_text(FOREIGN)
    path.chmod(0o644)
    return path


def assert_untouched(path) -> None:
    assert path.read_text() == FOREIGN
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_log_file_setting_naming_a_file_that_is_no_log_is_refused_and_left_as_it_is(tmp_path):
    accounts = foreign_file(tmp_path / "passwd")

    done = flask(tmp_path / "instance", "db", "upgrade", LOG_FILE=str(accounts))

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: LOG_FILE: cannot write the log file {str(accounts)!r}"), line
    assert "not a log" in line, line
    assert_untouched(accounts)


def test_a_consumer_refuses_a_queue_file_setting_naming_a_file_that_is_no_database(tmp_path):
    from tasks.workers import consumer_command

    accounts = foreign_file(tmp_path / "passwd")

    done = python(
        tmp_path / "instance",
        *consumer_command("tasks", workers=1)[1:],
        QUEUE_DRIVER="sqlite",
        QUEUE_SQLITE_PATH=str(accounts),
        LOG_FILE="-",
    )

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert f"QUEUE_SQLITE_PATH: cannot open the queue file {str(accounts)!r}" in line, line
    assert "not an SQLite database" in line, line
    assert_untouched(accounts)


def test_a_database_url_naming_a_file_that_is_no_database_is_refused_and_left_as_it_is(
    tmp_path,
):
    accounts = foreign_file(tmp_path / "passwd")

    done = flask(tmp_path / "instance", "tasks", "status", DATABASE_URL=f"sqlite:///{accounts}")

    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    said = f"{str(accounts)!r} is not an SQLite database; left as it is"
    assert line == f"error: DATABASE_URL: {said}"
    assert_untouched(accounts)


def test_a_file_with_another_hard_link_keeps_its_mode(tmp_path):
    from security.files import private_file

    log = tmp_path / "taskledger.log"
    log.write_text("2026-12-04 23:26:38,123 INFO 1 taskledger: started\n")
    log.chmod(0o644)
    os.link(log, tmp_path / "elsewhere")  # the same file under another name: not only ours

    assert private_file(log) == log
    assert stat.S_IMODE(log.stat().st_mode) == 0o644


def test_an_existing_log_of_ours_or_an_empty_one_outside_the_instance_is_used_and_tightened(
    tmp_path,
):
    for name, text in [("ours.log", "2026-12-04 23:26:38,123 INFO 1 x: y\n"), ("new.log", "")]:
        log = tmp_path / name
        log.write_text(text)
        log.chmod(0o644)

        done = flask(tmp_path / "instance", "db", "upgrade", LOG_FILE=str(log))

        assert done.returncode == 0, done.stderr
        assert log.read_text().startswith(text)
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
