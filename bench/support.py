"""What the benchmarks and the chaos harness share: databases, apps, consumer processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent

# Config keys a consumer must share with the process that starts it, by environment name.
CONSUMER_SETTINGS = {
    "SQLALCHEMY_DATABASE_URI": "DATABASE_URL",
    "QUEUE_DRIVER": "QUEUE_DRIVER",
    "QUEUE_SQLITE_PATH": "QUEUE_SQLITE_PATH",
    "REDIS_URL": "REDIS_URL",
    "SECRET_KEY": "SECRET_KEY",
}


def ensure_postgres_database(url: str) -> None:
    """Create the database named in ``url`` when it does not exist yet."""
    target = make_url(url)
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        found = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": target.database}
        ).first()
        if found is None:
            conn.execute(text(f'CREATE DATABASE "{target.database}"'))
    admin.dispose()


def build_app(config: dict[str, Any]) -> Flask:
    """An app on the given settings, its schema migrated to the heads."""
    from flask_migrate import upgrade

    from app import create_app
    from extensions import db

    app = create_app(config)
    with app.app_context():
        try:
            upgrade(directory=str(ROOT / "migrations"), revision="heads")
        except SystemExit as exc:
            # Flask-Migrate logs the cause and exits; a caller running several
            # benchmarks must get an error it can record instead.
            raise RuntimeError(
                f"migrating {db.engine.url.render_as_string()} to the heads failed "
                "(the cause is logged above; a database left by an older migration "
                "chain needs a reset)"
            ) from exc
        db.session.remove()
    return app


def reset_postgres_schema(url: str) -> None:
    """Empty a database the benchmark owns: drop and recreate its public schema."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def consumer_env(app: Flask, **extra: str) -> dict[str, str]:
    """The environment of a consumer that works on the same database and queues as ``app``."""
    env = dict(os.environ)
    for key, name in CONSUMER_SETTINGS.items():
        value = app.config.get(key)
        if value not in (None, ""):
            env[name] = str(value)
    for key, value in app.config.items():
        if key.startswith("TASK_RUNNER_") and value not in (None, ""):
            env[key] = str(value)
    env["INSTANCE_PATH"] = str(app.instance_path)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def huey_consumer(target: str, workers: int = 2, worker_type: str = "process") -> list[str]:
    """The consumer command line of the production ``tasks`` consumer, for any Huey target."""
    from tasks.workers import consumer_command

    command = consumer_command("tasks", workers=workers)
    command[3] = target
    command[command.index("-k") + 1] = worker_type
    return command


class ProcessPool:
    """Consumer processes in their own process groups, each logging to its own file."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        self.killed: set[int] = set()

    def start(self, command: Sequence[str], name: str = "consumer") -> subprocess.Popen:
        path = self.log_dir / f"{name}-{len(self.processes)}.log"
        with open(path, "wb") as log:
            process = subprocess.Popen(
                list(command),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = path  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.processes if p.poll() is None]

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL the consumer and its workers at once, as a crashed host would."""
        self.killed.add(process.pid)
        _signal_group(process, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self, process: subprocess.Popen, grace: float = 5.0) -> None:
        """A graceful stop (SIGINT: running tasks finish), SIGKILL after ``grace`` seconds."""
        _signal_group(process, signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill(process)

    def stop_all(self, grace: float = 5.0) -> None:
        for process in self.alive():
            _signal_group(process, signal.SIGINT)
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(process)

    @staticmethod
    def log_of(process: subprocess.Popen) -> str:
        return Path(process.log_path).read_text(errors="replace")  # type: ignore[attr-defined]


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.01, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def python_version() -> str:
    return sys.version.split()[0]
