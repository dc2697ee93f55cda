"""The lean consumer: every queue served by as few processes as Huey allows.

``python -m tasks.lean --lane default,tasks --lane builder,long-job [-n]`` runs
one consumer with one process worker per lane (a lane is a group of queues
served in turn by one worker) and one scheduler for every queue
(``huey_internals.LeanConsumer``). Process
workers keep the per-task timeouts hard (SIGALRM), as in per-queue mode, so the
routing rule holds in both modes; what lean mode gives up is parallelism: a
long job holds its lane until it ends or times out.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tasks import presence
from tasks.huey_internals import LeanConsumer
from tasks.routing import PERIODIC_QUEUE, QUEUE_NAMES

logger = logging.getLogger("huey.consumer")


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
        initial_delay=args.delay,
        max_delay=args.max_delay,
    )
    consumer.watcher = presence.present(app, consumer.hueys, "process", consumer.workers)
    logger.info("Lean consumer serving %s", " | ".join(",".join(lane) for lane in lanes))
    consumer.run()


if __name__ == "__main__":
    main()
