"""The runner's own periodic tasks: relay, stuck sweep, throughput roll-up, prune.

Declared like every package's (``periodic``, ``Cron``, ``Every``, which the contract
hands to the others), beside the code they call. All are enqueued by the ``default``
queue's consumer of the host that runs periodic tasks; every other consumer runs with
periodic tasks off (``-n``). Each run claims its schedule slot first (``tasks.slots``),
so a second host with periodic tasks on never runs a slot twice.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from taskrunner import delivery, runner, schedules
from taskrunner.ledger import Actor, ledger
from tasks.routing import periodic
from tasks.schedules import Cron, Every, crontab

logger = logging.getLogger(__name__)


@periodic("taskrunner.relay_events", Every("TASK_RUNNER_RELAY_SECONDS"), timeout=120)
def relay_events() -> None:
    """Deliver outbox events a crashed process left undelivered; retry refused deliveries."""
    count = delivery.relay()
    if count:
        logger.info("Relayed %d undelivered events", count)


class Swept(NamedTuple):
    units: int  # newly stale
    missed: int  # schedule slots written missed
    lost: int  # schedule slots whose body's worker is gone, ended failed


# Every few minutes, hourly at most: a lost worker is found in minutes (docs/operations.md).
@periodic("taskrunner.detect_stuck", Every("TASK_RUNNER_SWEEP_SECONDS"), timeout=300)
def detect_stuck() -> Swept:
    """The stuck sweep (also ``flask tasks detect-stuck``): stale units get one
    ``tasks.unit.stuck`` per episode, schedules' unclaimed slots are written missed (one
    ``tasks.schedule.missed`` per episode), and slots whose body's worker is gone are
    ended failed."""
    return Swept(ledger.sweeps.mark_stuck(), schedules.watch(), schedules.end_lost_bodies())


@periodic("taskrunner.roll_throughput", Every("TASK_RUNNER_THROUGHPUT_SECONDS"), timeout=120)
def roll_throughput() -> None:
    """Units settled per minute and type, for the queues page: the minutes just ended."""
    ledger.throughput.roll()


@periodic("taskrunner.prune", Cron(crontab(minute="17", hour="3")), timeout=1800)
def prune() -> None:
    """Daily: delete terminal runs older than the retention, and the queues' leftovers."""
    report = runner.prune(actor=Actor("schedule"))
    logger.info(
        "Pruned %d runs, %d units, %d queue leftovers, %d schedule slots",
        report.runs,
        report.units,
        report.queue_keys,
        report.slots,
    )
