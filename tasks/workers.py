"""``flask workers``: start the Huey consumers the routing table needs.

``per-queue`` (production): one ``huey_consumer`` per queue, with the worker
type and count of ``QUEUES``. ``lean`` (development, the demo): one consumer
process for every queue, with one process worker per lane (``tasks.lean``).
Both keep process workers, so job timeouts stay hard, and both run the
periodic tasks on one consumer only. Before it starts anything, the command checks that
the PostgreSQL server has room for the connections its consumers may hold
(``tasks.budget``); ``--plan`` prints them.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import click
from flask import current_app
from flask.cli import with_appcontext

from security.refusal import refuse
from tasks.budget import ProcessBudget, consumer_processes, server_room
from tasks.queues import libpq_dsn
from tasks.routing import PERIODIC_QUEUE, QUEUE_NAMES, QUEUES

CONSUMER_ATTR = {name: name.replace("-", "_") for name in QUEUE_NAMES}


@dataclass(frozen=True)
class ConsumerPlan:
    """One consumer process to start: the queues it serves and its command line."""

    name: str
    queues: tuple[str, ...]
    periodic: bool
    command: tuple[str, ...]
    worker_type: str = "process"
    workers: int = 1


def consumer_command(
    queue: str,
    workers: int | None = None,
    periodic: bool = False,
    worker_type: str | None = None,
    polling: tuple[float, float, float] | None = None,
) -> list[str]:
    """The ``huey_consumer`` command line that serves one queue (``polling``: Huey's
    initial and longest wait on an empty queue, and its backoff factor)."""
    spec = QUEUES[queue]
    delay, max_delay, backoff = polling or (0.1, 1.0, None)
    command = [
        sys.executable,
        "-m",
        "huey.bin.huey_consumer",
        f"tasks.consumer.{CONSUMER_ATTR[queue]}",
        "-k",
        worker_type or spec.worker_type,
        "-w",
        str(workers or spec.workers),
        "-d",
        str(delay),
        "-m",
        str(max_delay),
    ]
    if backoff is not None:
        command += ["-b", str(backoff)]
    if not periodic:
        command.append("-n")
    return command


def lanes(queues: Sequence[str]) -> list[tuple[str, ...]]:
    """The lean lanes of these queues, in routing-table order."""
    grouped: dict[str, list[str]] = {}
    for queue in QUEUE_NAMES:
        if queue in queues:
            grouped.setdefault(QUEUES[queue].lane, []).append(queue)
    return [tuple(lane) for lane in grouped.values()]


def plan(
    mode: str, queues: Sequence[str] = QUEUE_NAMES, periodic: bool = True
) -> list[ConsumerPlan]:
    """The consumers ``flask workers`` starts for a mode and a set of queues."""
    queues = [q for q in QUEUE_NAMES if q in queues]
    if mode == "per-queue":
        return [
            ConsumerPlan(
                queue,
                (queue,),
                periodic and queue == PERIODIC_QUEUE,
                tuple(consumer_command(queue, periodic=periodic and queue == PERIODIC_QUEUE)),
                QUEUES[queue].worker_type,
                QUEUES[queue].workers,
            )
            for queue in queues
        ]
    if mode == "lean":
        with_periodic = periodic and PERIODIC_QUEUE in queues
        command = [sys.executable, "-m", "tasks.lean"]
        for lane in lanes(queues):
            command += ["--lane", ",".join(lane)]
        if not with_periodic:
            command.append("-n")
        return (
            [
                ConsumerPlan(
                    "lean",
                    tuple(queues),
                    with_periodic,
                    tuple(command),
                    "process",
                    len(lanes(queues)),
                )
            ]
            if queues
            else []
        )
    raise ValueError(f"unknown mode {mode!r}")


@click.command("workers")
@click.option(
    "--mode", type=click.Choice(["lean", "per-queue"]), default="per-queue", show_default=True
)
@click.option(
    "--queue",
    "only",
    multiple=True,
    type=click.Choice(QUEUE_NAMES),
    help="Serve only these queues (repeatable).",
)
@click.option("--no-periodic", is_flag=True, help="Do not run periodic tasks here.")
@with_appcontext
@click.option("--dry-run", is_flag=True, help="Print the commands instead of running them.")
@click.option(
    "--plan",
    "show_plan",
    is_flag=True,
    help="Print the database connections each process may hold, and in total.",
)
def workers_command(
    mode: str, only: tuple[str, ...], no_periodic: bool, dry_run: bool, show_plan: bool
) -> None:
    """Start the Huey consumers; periodic tasks run on one consumer only."""
    plans = plan(mode, only or QUEUE_NAMES, periodic=not no_periodic)
    postgres_queue = current_app.config["QUEUE_DRIVER"] == "postgres"
    budget = connection_plan(plans, postgres_queue)
    if show_plan:
        for line in plan_lines(budget, postgres_queue):
            click.echo(line)
        return
    if dry_run:
        for item in plans:
            click.echo(shlex.join(item.command))  # its interpreter too: a line that runs
        return
    refusal = room_refusal(budget, postgres_queue)
    if refusal:
        refuse(refusal)
    processes = {}
    for item in plans:
        click.echo(f"starting {item.name}: {' '.join(item.command[1:])}", err=True)
        processes[item.name] = subprocess.Popen(item.command, env=os.environ.copy())
    supervisor = Supervisor(processes)
    signal.signal(signal.SIGTERM, lambda signum, _frame: supervisor.stop(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: supervisor.stop(signum))
    problems = supervisor.wait()
    if problems:
        # Non-zero, so a supervisor (systemd's Restart=) sees the failure and restarts us.
        refuse("; ".join(problems))


def connection_plan(plans: Sequence[ConsumerPlan], postgres_queue: bool) -> list[ProcessBudget]:
    """Every process the consumers run, by kind, with its connections."""
    return [
        process
        for item in plans
        for process in consumer_processes(item.name, item.worker_type, item.workers, postgres_queue)
    ]


def plan_lines(budget: Sequence[ProcessBudget], postgres_queue: bool) -> list[str]:
    """``--plan``: a row per kind of process (connections each), then the totals."""
    lines = [f"{'consumer':<10} {'process':<12} {'count':>5} {'ledger':>7} {'queue':>6}"]
    for p in budget:
        lines.append(f"{p.consumer:<10} {p.role:<12} {p.count:>5} {p.ledger:>7} {p.queue:>6}")
    ledger = sum(p.count * p.ledger for p in budget)
    queue = sum(p.count * p.queue for p in budget)
    where = "the PostgreSQL queue" if postgres_queue else "a queue outside PostgreSQL"
    lines.append(
        f"total: {sum(p.count for p in budget)} processes, {ledger} ledger + {queue} queue"
        f" = {ledger + queue} connections at most ({where})"
    )
    return lines


def room_refusal(budget: Sequence[ProcessBudget], postgres_queue: bool) -> str | None:
    """Why the PostgreSQL server(s) cannot take this plan now, or None when they can (or
    when nothing of it is on PostgreSQL)."""
    config = current_app.config
    needs: dict[str, int] = {}  # libpq DSN -> connections (the queue is in the ledger's)
    ledger_url = str(config["SQLALCHEMY_DATABASE_URI"])
    if ledger_url.startswith("postgres"):
        needs[libpq_dsn(ledger_url)] = sum(p.count * p.ledger for p in budget)
    if postgres_queue:
        queue_dsn = libpq_dsn(ledger_url)
        needs[queue_dsn] = needs.get(queue_dsn, 0) + sum(p.count * p.queue for p in budget)
    connect_args = config["SQLALCHEMY_ENGINE_OPTIONS"].get("connect_args", {})
    for dsn, needed in needs.items():
        room = server_room(dsn, connect_args)
        if needed > room.free:
            return (
                f"the consumers may hold {needed} connections but the server allows"
                f" {room.free} more ({'; '.join(room.reasons)}); see flask workers --plan"
            )
    return None


class Supervisor:
    """The consumers of one ``flask workers``: stopped together, and judged on exit.

    A stop (SIGTERM, SIGINT) is passed on to every consumer; a consumer that ends
    without one (it crashed, or exited on its own) stops the others too, so the
    command ends and says so rather than serving some queues silently.
    """

    def __init__(self, processes: dict[str, subprocess.Popen]) -> None:
        self.processes = processes
        self.stop_signal: int | None = None

    def stop(self, signum: int) -> None:
        self.stop_signal = signum
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signum)

    def wait(self, poll_seconds: float = 0.5) -> list[str]:
        """Wait for every consumer; what went wrong (empty after a clean stop)."""
        problems: list[str] = []
        try:
            while any(process.poll() is None for process in self.processes.values()):
                if self.stop_signal is None and not problems:
                    ended = self._ended_unasked()
                    if ended:
                        problems += ended
                        self._forward(signal.SIGTERM)
                time.sleep(poll_seconds)
        finally:
            for process in self.processes.values():
                process.wait()
        if not problems and self.stop_signal is None:
            problems = self._ended_unasked()
        return problems + self._failed_stops()

    def _ended_unasked(self) -> list[str]:
        return [
            f"consumer {name} exited on its own (exit {process.returncode})"
            for name, process in self.processes.items()
            if process.poll() is not None
        ]

    def _failed_stops(self) -> list[str]:
        if self.stop_signal is None:
            return []
        # A consumer that stopped on the signal passed on to it stopped cleanly too.
        clean = (0, -self.stop_signal)
        return [
            f"consumer {name} exited {process.returncode} on stop"
            for name, process in self.processes.items()
            if process.returncode not in clean
        ]
