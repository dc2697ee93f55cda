"""``flask workers`` judges its consumers: a clean stop exits 0, anything else does not.

The consumers here are small Python processes standing in for ``huey_consumer``, so
the tests take a fraction of a second.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tasks import workers

# Waits for SIGTERM (or SIGINT), then exits 0, as huey_consumer does on a stop.
SERVES = (
    "import signal, sys, time\n"
    "for s in (signal.SIGTERM, signal.SIGINT): signal.signal(s, lambda *_: sys.exit(0))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def consumer(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    if "ready" in code:
        assert process.stdout.readline().strip() == "ready"  # its handlers are installed
    return process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_that_every_consumer_obeys_is_clean(signum):
    supervisor = workers.Supervisor({"tasks": consumer(SERVES), "default": consumer(SERVES)})
    supervisor.stop(signum)
    assert supervisor.wait(poll_seconds=0.05) == []


def test_a_consumer_that_exits_on_its_own_stops_the_others_and_fails_the_command():
    serving = consumer(SERVES)
    supervisor = workers.Supervisor({"tasks": consumer("raise SystemExit(3)"), "io": serving})
    assert supervisor.wait(poll_seconds=0.05) == ["consumer tasks exited on its own (exit 3)"]
    assert serving.returncode == 0  # stopped by the supervisor, not left serving alone


def test_a_consumer_that_ends_cleanly_but_unasked_still_fails_the_command():
    supervisor = workers.Supervisor({"tasks": consumer("pass")})
    assert supervisor.wait(poll_seconds=0.05) == ["consumer tasks exited on its own (exit 0)"]


def test_a_consumer_that_fails_its_stop_fails_the_command():
    failing = SERVES.replace("sys.exit(0)", "sys.exit(2)")
    supervisor = workers.Supervisor({"tasks": consumer(SERVES), "builder": consumer(failing)})
    supervisor.stop(signal.SIGTERM)
    assert supervisor.wait(poll_seconds=0.05) == ["consumer builder exited 2 on stop"]


def test_the_workers_command_exits_non_zero_with_one_line_when_a_consumer_dies(cli, monkeypatch):
    dying = workers.ConsumerPlan("tasks", ("tasks",), False, (sys.executable, "-c", "exit(5)"))
    monkeypatch.setattr(workers, "plan", lambda *args, **kwargs: [dying])
    # The command installs its stop handlers in this process: pytest's go back after.
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = cli.invoke(args=["workers", "--mode", "per-queue"])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "error: consumer tasks exited on its own (exit 5)"
