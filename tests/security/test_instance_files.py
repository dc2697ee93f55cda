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


def flask(instance, *args: str) -> subprocess.CompletedProcess:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST", "DATABASE_", "QUEUE_", "REDIS_", "LOG_", "SECRET_"))
    }
    env |= {"INSTANCE_PATH": str(instance), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", *args],
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
