"""``flask workers``: start the Huey consumers the routing table needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import click

from tasks.routing import QUEUE_NAMES, QUEUES

CONSUMER_ATTR = {"default": "default", "tasks": "tasks", "builder": "builder",
                 "long-job": "long_job"}


def consumer_command(queue: str, workers: int | None = None, periodic: bool = False) -> list[str]:
    """The ``huey_consumer`` command line that serves one queue."""
    spec = QUEUES[queue]
    command = [
        sys.executable, "-m", "huey.bin.huey_consumer", f"tasks.consumer.{CONSUMER_ATTR[queue]}",
        "-k", spec.worker_type, "-w", str(workers or spec.workers), "-d", "0.1", "-m", "1.0",
    ]
    if not periodic:
        command.append("-n")
    return command


@click.command("workers")
@click.option("--mode", type=click.Choice(["lean", "per-queue"]), default="per-queue",
              show_default=True)
@click.option("--queue", "only", multiple=True, type=click.Choice(QUEUE_NAMES),
              help="Serve only these queues (repeatable).")
@click.option("--no-periodic", is_flag=True, help="Do not run periodic tasks here.")
def workers_command(mode: str, only: tuple[str, ...], no_periodic: bool) -> None:
    """Start one consumer per queue; periodic tasks on the default queue's consumer only."""
    queues = only or QUEUE_NAMES
    processes = []
    for queue in queues:
        command = consumer_command(
            queue, 1 if mode == "lean" else None,
            periodic=(queue == "default" and not no_periodic),
        )
        click.echo(f"starting {queue}: {' '.join(command[2:])}", err=True)
        processes.append(subprocess.Popen(command, env=os.environ.copy()))

    def stop(signum, _frame):
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while any(process.poll() is None for process in processes):
            time.sleep(0.5)
    finally:
        for process in processes:
            process.wait()
