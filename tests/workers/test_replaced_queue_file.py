"""A SQLite queue file replaced under running consumers (deleted, or truncated): the
consumers notice at their next wake-up and reopen the path, so what the CLI dispatches
into the new file runs; and every process finds the same file, whatever its working
directory. Real consumer processes; the ledger is the test backend's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnostics.probe import TYPE
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from tasks.huey_internals import last_read
from tasks.queues import queues
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers


@pytest.fixture
def sqlite_queue(make_app, tmp_path):
    path = tmp_path / "queue.sqlite3"
    app = make_app(
        QUEUE_DRIVER="sqlite", QUEUE_SQLITE_PATH=str(path), CONSUMER_HEARTBEAT_SECONDS=0.5
    )
    pool = Consumers(app, tmp_path / "logs")
    with app.app_context():
        yield pool, path
    pool.stop_all()


def completed(run_uuid: str) -> bool:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status == "completed"


def delete(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def truncate(path: Path) -> None:
    os.truncate(path, 0)


@pytest.mark.parametrize("replace", [delete, truncate], ids=["deleted", "truncated"])
def test_a_running_consumer_reopens_a_replaced_queue_file_and_runs_what_is_sent_to_it(
    sqlite_queue, replace
):
    pool, path = sqlite_queue
    consumer = pool.start("tasks", workers=2)
    before = runner.start(TYPE, {"units": 3}, "test")
    wait_for(lambda: completed(before.uuid), timeout=60, message="the first run")
    inode = path.stat().st_ino

    replace(path)
    after = runner.start(TYPE, {"units": 5}, "test")  # as `flask tasks start` would

    wait_for(lambda: completed(after.uuid), timeout=60, message="the run sent to the new file")
    assert consumer.poll() is None
    assert "was replaced (deleted or truncated): reopening it" in pool.log_of(consumer)
    if replace is delete:
        assert path.stat().st_ino != inode


def test_a_relative_queue_path_is_the_instance_folders_file_whatever_the_working_directory(
    make_app, tmp_path, monkeypatch
):
    app = make_app(QUEUE_DRIVER="sqlite", QUEUE_SQLITE_PATH="relative-queue.sqlite3")
    monkeypatch.chdir(tmp_path)

    with app.app_context():
        filename = queues().huey("tasks").storage.filename

    assert filename == str(Path(app.instance_path) / "relative-queue.sqlite3")


def start_from_the_cli(units: int):
    from flask import current_app

    return current_app.test_cli_runner().invoke(
        args=["tasks", "start", TYPE, "--context", f'{{"units": {units}}}']
    )


def test_the_cli_says_where_its_jobs_wait_when_no_consumer_reads_the_queue_file(
    sqlite_queue,
):
    pool, path = sqlite_queue

    unread = start_from_the_cli(2)

    assert unread.exit_code == 0, unread.output
    assert f"warning: no consumer has read the queue file {path} lately" in unread.stderr

    pool.start("tasks", workers=1)
    wait_for(lambda: last_read(queues().huey("tasks")), timeout=30, message="a reader's mark")
    read = start_from_the_cli(2)

    assert read.exit_code == 0, read.output
    assert "warning" not in read.stderr


def test_after_a_replacement_the_new_file_says_its_consumers_read_it(sqlite_queue):
    pool, path = sqlite_queue
    pool.start("tasks", workers=1)
    wait_for(lambda: last_read(queues().huey("tasks")), timeout=30, message="a reader's mark")

    delete(path)

    wait_for(
        lambda: last_read(queues().huey("tasks")),
        timeout=30,
        message="the consumer marking the new file as read",
    )
    assert "warning" not in start_from_the_cli(1).stderr
