"""Real processes: consumers started exactly as ``flask workers`` starts them, and a
gunicorn serving the app; each in its own process group, logging to its own file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from harness.environment import ROOT
from harness.waiting import wait_for

# How often a test's consumer polls an empty queue: first after 50 ms, backing off to
# half a second (production: 0.1 s to 1 s), so a test waits little for its jobs.
TEST_POLLING = (0.05, 0.5, 1.1)
# The web tier's settings, the same file production starts gunicorn with.
GUNICORN_CONFIG = ROOT / "gunicorn.conf.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, stack = [], [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack.extend(children.get(current, []))
    return tree


def signal_group(process: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the process group the process leads (it and its children)."""
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def stop_processes(
    processes: Sequence[subprocess.Popen], signum: int, grace: float, group: bool = True
) -> list[subprocess.Popen]:
    """Send ``signum`` to the processes still running (to their whole groups, or to the
    leaders only, which stop their children themselves), wait up to ``grace`` seconds for
    them all, and return the ones still running then."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        if group:
            signal_group(process, signum)
        else:
            process.send_signal(signum)
    deadline = time.monotonic() + grace
    stuck = []
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stuck.append(process)
    return stuck


def huey_consumer(target: str, workers: int = 2, worker_type: str = "process") -> list[str]:
    """The production ``tasks`` consumer's command line, serving any Huey ``target``
    (a benchmark's bare Huey instance, to compare like with like)."""
    from tasks.workers import consumer_command

    command = consumer_command("tasks", workers=workers, worker_type=worker_type)
    command[3] = target
    return command


class ProcessPool:
    """Processes in their own process groups, each logging to its own file, all stopped
    (SIGKILL if need be) by ``stop_all``."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        self.killed: set[int] = set()

    signal_group = staticmethod(signal_group)

    def spawn(self, command: Sequence[str], name: str = "process", **env: str) -> subprocess.Popen:
        path = self.log_dir / f"{name}-{len(self.processes)}.log"
        with open(path, "wb") as log:
            process = subprocess.Popen(
                list(command),
                cwd=ROOT,
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = path  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def start_consumer(
        self,
        queue: str = "tasks",
        workers: int | None = None,
        worker_type: str | None = None,
        periodic: bool = False,
        polling: tuple[float, float, float] | None = TEST_POLLING,
        clock_offset: str | None = None,
        **env: str,
    ) -> subprocess.Popen:
        """One queue's consumer, on the command line ``flask workers`` would run.

        ``clock_offset`` (``"-60s"``, ``"+60s"``): the process's wall clock shifted by
        Debian's ``faketime``, as on a host whose clock is wrong.
        """
        from tasks.workers import consumer_command

        command = consumer_command(
            queue, workers=workers, periodic=periodic, worker_type=worker_type, polling=polling
        )
        if clock_offset is not None:
            command = ["faketime", "-f", clock_offset, *command]
            # A wrong wall clock; the monotonic clock (timed waits) stays the kernel's, and
            # time.sleep is made to work with it (harness/faketime_site/sitecustomize.py).
            site = f"{ROOT / 'harness' / 'faketime_site'}:{self.env.get('PYTHONPATH', ROOT)}"
            env = {"FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": site, **env}
        return self.spawn(command, f"consumer-{queue}", **env)

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.processes if p.poll() is None]

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL the process and its children at once, as a crashed host would."""
        self.killed.add(process.pid)
        signal_group(process, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self, process: subprocess.Popen, grace: float = 5.0) -> None:
        """A graceful stop (SIGINT: running tasks finish), SIGKILL after ``grace`` seconds."""
        for stuck in stop_processes([process], signal.SIGINT, grace):
            self.kill(stuck)

    def stop_all(self, grace: float = 5.0) -> None:
        for stuck in stop_processes(self.processes, signal.SIGINT, grace):
            self.kill(stuck)

    @staticmethod
    def log_of(process: subprocess.Popen) -> str:
        return Path(process.log_path).read_text(errors="replace")  # type: ignore[attr-defined]

    def logs(self) -> str:
        return "\n".join(self.log_of(process) for process in self.processes)


class WebServer:
    """gunicorn on a free port of 127.0.0.1 with the project's ``gunicorn.conf.py`` (its
    worker class, threads, limits and hooks, as in production), healthy when made."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        workers: int = 2,
        threads: int | None = None,
        name: str = "gunicorn",
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / f"{name}-{self.port}.log"
        # A test may name a config of its own that builds on the file (GUNICORN_CMD_ARGS,
        # tests/security/server_hooks.py): a --config given here would replace it.
        own_config = "--config" in env.get("GUNICORN_CMD_ARGS", "")
        command = [
            sys.executable, "-m", "gunicorn",
            *([] if own_config else ["--config", str(GUNICORN_CONFIG)]),
            "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers),
        ]  # fmt: skip
        if threads is not None:
            command += ["--threads", str(threads)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._healthy, timeout=30, message=f"gunicorn on {self.url}")

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn exited: {self.log_path.read_text()[-2000:]}")
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        for stuck in stop_processes([self.process], signal.SIGTERM, 10, group=False):
            signal_group(stuck, signal.SIGKILL)
            stuck.wait(timeout=10)
