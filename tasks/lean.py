"""The lean consumer: every queue served by as few processes as Huey allows.

``python -m tasks.lean --lane default,tasks --lane builder,long-job [-n]`` runs
one consumer with one process worker per lane (a lane is a group of queues
served in turn by one worker) and one scheduler for every queue. Process
workers keep the per-task timeouts hard (SIGALRM), as in per-queue mode, so the
routing rule holds in both modes; what lean mode gives up is parallelism: a
long job holds its lane until it ends or times out.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Sequence

from flask import Flask
from huey import Huey
from huey.consumer import Consumer, ProcessEnvironment, Scheduler, Worker

from tasks.interrupts import note_stop_signal
from tasks.presence import PresentMixin
from tasks.routing import PERIODIC_QUEUE, QUEUE_NAMES

logger = logging.getLogger("huey.consumer")


class LaneWorker(Worker):
    """One worker process that takes tasks from several queues, round robin."""

    process_name = "LaneWorker"

    def __init__(
        self,
        hueys: Sequence[Huey],
        stop_flag,
        default_delay: float,
        max_delay: float,
        backoff: float,
    ) -> None:
        self.hueys = list(hueys)
        self._next = 0
        super().__init__(self.hueys[0], stop_flag, default_delay, max_delay, backoff)

    def initialize(self) -> None:
        for huey in self.hueys:
            if len(self.hueys) > 1:
                # A blocking read would hold the lane on an empty queue while another waits.
                huey.storage.blocking = False
            self.huey = huey
            super().initialize()
        self.huey = self.hueys[0]

    def shutdown(self) -> None:
        for huey in self.hueys:
            self.huey = huey
            super().shutdown()

    def loop(self, now=None) -> None:
        for offset in range(len(self.hueys)):
            index = (self._next + offset) % len(self.hueys)
            huey = self.hueys[index]
            try:
                task = huey.dequeue()
            except Exception:
                self._logger.exception("Error reading from queue %s", huey.name)
                continue
            if task is None:
                continue
            # The next pass starts after this queue, so no queue of the lane starves.
            self._next = (index + 1) % len(self.hueys)
            self.delay = self.default_delay
            try:
                huey.execute(task, now)
            except Exception:
                self._logger.exception("Unhandled error during execution of task %s.", task.id)
            return
        if not any(huey.storage.blocking for huey in self.hueys):
            self.sleep()


class LaneScheduler(Scheduler):
    """Moves due scheduled tasks of every queue; enqueues periodic tasks of one queue."""

    def __init__(
        self, hueys: Sequence[Huey], stop_flag, interval: int, periodic_huey: Huey | None
    ) -> None:
        self.hueys = list(hueys)
        self.periodic_huey = periodic_huey
        super().__init__(
            periodic_huey or self.hueys[0], stop_flag, interval, periodic_huey is not None
        )

    def loop(self, now=None) -> None:
        current = self._next_loop
        self._next_loop += self.interval
        if self._next_loop < time.monotonic():
            self._next_loop = time.monotonic()
            return
        for huey in self.hueys:
            try:
                due = huey.read_schedule(now)
            except Exception:
                self._logger.exception("Error reading schedule of %s.", huey.name)
                continue
            for task in due:
                try:
                    huey.enqueue(task)
                except Exception:
                    self._logger.exception("Error enqueueing %s.", task)
        if self.periodic and self._next_periodic <= time.monotonic():
            while self._next_periodic <= time.monotonic():
                self._next_periodic += self.periodic_task_seconds
            self.enqueue_periodic_tasks(now)
        self.sleep_for_interval(current, self.interval)


class LaneEnvironment(ProcessEnvironment):
    def init_child(self, process) -> None:
        hueys = getattr(process, "hueys", [process.huey])

        def interrupt(signum, frame):
            note_stop_signal()
            # Same rule as Huey's: only a task in flight is interrupted (it is handed back).
            if any(huey._tasks_in_flight for huey in hueys):
                raise KeyboardInterrupt

        signal.signal(self.graceful, signal.SIG_IGN)
        signal.signal(self.interrupt, interrupt)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


class LeanConsumer(PresentMixin, Consumer):
    """A Huey consumer whose process workers each serve a lane of queues."""

    def __init__(
        self,
        lanes: Sequence[Sequence[Huey]],
        periodic_huey: Huey | None,
        app: Flask | None = None,
        **options,
    ) -> None:
        self.lanes = [list(lane) for lane in lanes]
        self.hueys = [huey for lane in self.lanes for huey in lane]
        self.periodic_huey = periodic_huey
        super().__init__(
            self.hueys[0],
            workers=0,
            periodic=periodic_huey is not None,
            worker_type="process",
            **options,
        )
        for huey in self.hueys:
            huey._timeout_handler = self.environment.timeout
        self.workers = len(self.lanes)
        self.worker_threads = [self._lane_process(i) for i in range(len(self.lanes))]
        if app is not None:
            self._present(app, self.hueys, "process", self.workers)

    def get_environment(self, worker_type: str) -> ProcessEnvironment:
        return LaneEnvironment(self._graceful_sig, self._interrupt_sig)

    def _create_scheduler(self) -> LaneScheduler:
        return LaneScheduler(
            self.hueys, self.stop_flag, self.scheduler_interval, self.periodic_huey
        )

    def _lane_process(self, index: int):
        worker = LaneWorker(
            self.lanes[index], self.stop_flag, self.default_delay, self.max_delay, self.backoff
        )
        return worker, self._create_process(worker, f"Lane-{index + 1}")

    def start(self) -> None:
        for huey in self.hueys[1:]:
            huey.storage.close()  # forked children must not share a connection
        super().start()

    def check_worker_health(self) -> bool:
        healthy = True
        for index, (_worker, process) in enumerate(self.worker_threads):
            if not self.environment.is_alive(process):
                self._logger.warning("Lane %d worker died, restarting.", index + 1)
                self.worker_threads[index] = self._lane_process(index)
                self.worker_threads[index][1].start()
                healthy = False
        if not self.environment.is_alive(self.scheduler):
            self._logger.warning("Scheduler died, restarting.")
            self.scheduler = self._create_process(self._create_scheduler(), "Scheduler")
            self.scheduler.start()
        return healthy


def parse_lanes(values: Sequence[str]) -> list[list[str]]:
    lanes = []
    for value in values:
        lane = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in lane if name not in QUEUE_NAMES]
        if not lane or unknown:
            raise ValueError(f"a lane is a comma-separated list of queues, not {value!r}")
        lanes.append(lane)
    return lanes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.lean", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--lane",
        action="append",
        required=True,
        help="Queues served by one worker process, e.g. default,tasks",
    )
    parser.add_argument("-n", "--no-periodic", action="store_true")
    parser.add_argument("-d", "--delay", type=float, default=0.1)
    parser.add_argument("-m", "--max-delay", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:
        lanes = parse_lanes(args.lane)
    except ValueError as exc:
        parser.error(str(exc))

    from tasks.consumer import app

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] %(levelname)s:%(name)s:%(process)d:%(message)s")
    )
    logging.getLogger("huey").addHandler(handler)
    logging.getLogger("huey").setLevel(logging.INFO)
    queues = app.extensions["queues"]
    served = {name for lane in lanes for name in lane}
    periodic = None
    if PERIODIC_QUEUE in served and not args.no_periodic:
        periodic = queues.huey(PERIODIC_QUEUE)
    consumer = LeanConsumer(
        [[queues.huey(name) for name in lane] for lane in lanes],
        periodic,
        app,
        initial_delay=args.delay,
        max_delay=args.max_delay,
    )
    logger.info("Lean consumer serving %s", " | ".join(",".join(lane) for lane in lanes))
    consumer.run()


if __name__ == "__main__":
    main()
