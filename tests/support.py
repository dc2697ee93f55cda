"""Helpers shared by the tests: waiting, real consumers, backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Settings a consumer process must share with the test's app (passed as environment).
SHARED_SETTINGS = (
    "SQLALCHEMY_DATABASE_URI",
    "QUEUE_DRIVER",
    "QUEUE_SQLITE_PATH",
    "REDIS_URL",
    "SECRET_KEY",
    "TASK_RUNNER_RETRY_HORIZON_HOURS",
    "TASK_RUNNER_STUCK_AFTER_MINUTES",
    "TASK_RUNNER_HEARTBEAT_SECONDS",
    "TASK_RUNNER_RATE_WINDOW_SECONDS",
    "TASK_RUNNER_NEVER_STARTED_SECONDS",
    "TASK_RUNNER_RETENTION_DAYS",
    "TASK_RUNNER_DISPATCH_CHUNK",
    "LLM_DRIVER",
    "LLM_BASE_URL",
    "LLM_API_KEY",
    "LLM_MODEL",
    "DOCUMENTS_PROVIDER_URL",
    "DOCUMENTS_PROVIDER_TOKEN",
    "DOCUMENTS_PROVIDER_TIMEOUT_SECONDS",
)
ENV_NAME = {"SQLALCHEMY_DATABASE_URI": "DATABASE_URL"}


# The pinned JSON shapes of SPEC §9, shared by the CLI and the API tests.
RUN_KEYS = {"uuid", "type", "status", "initiator", "started_at", "finished_at", "units"}
COUNT_KEYS = {"total", "pending", "running", "completed", "failed", "skipped", "stale"}
UNIT_KEYS = {
    "unit_key",
    "tenant_id",
    "status",
    "attempts",
    "last_error",
    "started_at",
    "finished_at",
    "stale",
    "stale_reason",
}


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def consumer_env(app, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    for key in SHARED_SETTINGS:
        value = app.config.get(key)
        if value not in (None, ""):
            env[ENV_NAME.get(key, key)] = str(value)
    env["INSTANCE_PATH"] = str(app.instance_path)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Consumers:
    """Real ``huey_consumer`` processes, stopped (SIGKILL if need be) at teardown."""

    def __init__(self, app, log_dir: Path) -> None:
        self.app = app
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []

    def start(
        self,
        queue: str = "tasks",
        workers: int = 2,
        worker_type: str = "process",
        periodic: bool = False,
        **env: str,
    ) -> subprocess.Popen:
        attr = queue.replace("-", "_")
        command = [
            sys.executable,
            "-m",
            "huey.bin.huey_consumer",
            f"tasks.consumer.{attr}",
            "-k",
            worker_type,
            "-w",
            str(workers),
            "-d",
            "0.05",
            "-m",
            "0.5",
            "-b",
            "1.1",
        ]
        if not periodic:
            command.append("-n")
        log = open(self.log_dir / f"consumer-{len(self.processes)}-{queue}.log", "wb")
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=consumer_env(self.app, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        process.log_path = log.name  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    @staticmethod
    def signal_group(process: subprocess.Popen, signum: int) -> None:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL the consumer and its worker processes, as a crash would."""
        self.signal_group(process, signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                self.signal_group(process, signal.SIGINT)
        deadline = time.monotonic() + 5
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(process)

    def logs(self) -> str:
        return "\n".join(
            Path(p.log_path).read_text(errors="replace")  # type: ignore[attr-defined]
            for p in self.processes
        )
