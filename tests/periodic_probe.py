"""A periodic task that counts its own runs, for consumers started with
``TASKLEDGER_EXTRA_MODULES=tests.periodic_probe`` (never imported by the test process).

It runs on the relay's period; each run leaves one ``diagnostic_effects`` row of the
batch ``PROBE``, so the runs are counted apart from the slot claims that allow them.
``PERIODIC_PROBE_HOLD`` (seconds, in the consumer's environment) holds each body that
long before it counts, so a test can stop a consumer in the middle of one.
"""

from __future__ import annotations

import os
import time

from diagnostics.effects import record_effect
from tasks.routing import periodic
from tasks.schedules import Every

NAME = "tests.periodic_probe"
PROBE = "periodic-probe"


@periodic(NAME, Every("TASK_RUNNER_RELAY_SECONDS"), timeout=30)
def probe() -> None:
    time.sleep(float(os.environ.get("PERIODIC_PROBE_HOLD", "0")))
    record_effect(PROBE, f"{os.getpid()}-{time.time_ns()}")


def init_app(_app) -> None:
    """Nothing to bind: importing the module declared the periodic task."""
