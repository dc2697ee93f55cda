"""``flask workers --plan``: the connections each process of the consumers may hold, and
the total that ``flask workers`` checks against the server before it starts them."""

from __future__ import annotations

import re

from app import create_app
from tasks import workers
from tasks.budget import LEDGER_CONNECTIONS, QUEUE_CONNECTIONS, Room
from tasks.routing import QUEUES


def rows(output: str) -> dict[tuple[str, str], tuple[int, int, int]]:
    found = {}
    for line in output.splitlines()[1:-1]:
        consumer, *role, count, ledger, queue = line.split()
        found[(consumer, " ".join(role))] = (int(count), int(ledger), int(queue))
    return found


def plan_app(base_config: dict, **config: str):
    """An app of the test's settings that only plans (no queue is ever opened)."""
    return create_app({**base_config, **config})


def test_the_plan_prints_each_process_and_a_total_that_adds_them_up(base_config):
    app = plan_app(base_config, QUEUE_DRIVER="postgres")
    result = app.test_cli_runner().invoke(args=["workers", "--plan"])

    assert result.exit_code == 0, result.output
    found = rows(result.output)
    io_threads = f"{QUEUES['io'].workers} threads"
    # Thirty-two threads, one process: the same two and two as a single worker.
    assert found[("io", io_threads)] == (1, LEDGER_CONNECTIONS, QUEUE_CONNECTIONS)
    # A process worker (one thread) waits for work on its statement connection.
    assert found[("tasks", "worker")] == (QUEUES["tasks"].workers, 2, 1)
    assert found[("tasks", "main")] == (1, 1, 0)
    assert found[("tasks", "scheduler")] == (1, 0, 1)
    ledger = sum(count * led for count, led, _ in found.values())
    queue = sum(count * q for count, _, q in found.values())
    total = result.output.splitlines()[-1]
    assert total == (
        f"total: {sum(c for c, _, _ in found.values())} processes, {ledger} ledger + {queue}"
        f" queue = {ledger + queue} connections at most (the PostgreSQL queue)"
    )
    assert (ledger, queue) == (20, 13)


def test_off_the_postgresql_queue_the_plan_holds_no_queue_connection(base_config):
    app = plan_app(base_config, QUEUE_DRIVER="redis")
    result = app.test_cli_runner().invoke(args=["workers", "--plan", "--mode", "lean"])

    assert result.exit_code == 0, result.output
    assert {q for _, _, q in rows(result.output).values()} == {0}
    assert re.search(r"= 5 connections at most \(a queue outside PostgreSQL\)$", result.output)


def test_flask_workers_refuses_before_starting_anything_when_the_server_has_no_room(
    base_config, monkeypatch
):
    app = plan_app(
        base_config, QUEUE_DRIVER="postgres", SQLALCHEMY_DATABASE_URI="postgresql://db/x"
    )
    monkeypatch.setattr(workers, "server_room", lambda *_: Room(7, ("role limit 10 - 3 in use",)))
    monkeypatch.setattr(workers.subprocess, "Popen", lambda *_a, **_k: pytest_fail())

    result = app.test_cli_runner().invoke(args=["workers"])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: the consumers may hold 33 connections but the server allows 7 more"
        " (role limit 10 - 3 in use); see flask workers --plan"
    ]


def pytest_fail():
    raise AssertionError("a consumer was started")
