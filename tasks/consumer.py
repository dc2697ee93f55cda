"""Entry module of the Huey consumers: ``huey_consumer tasks.consumer.<queue>``.

Importing it builds the app from the environment (which imports every job module, a
deployment's own modules of ``TASKLEDGER_EXTRA_MODULES`` included) and exposes one
Huey instance per queue.
"""

import logging

from app import create_app
from config import Config, ConfigError
from startup import configure_process_logging, refuse_config
from tasks.budget import consumer_config
from tasks.huey_internals import check_periodic_every

try:
    # The settings are read once before logging is set up, so a bad LOG_LEVEL (or any
    # other) is refused on one line rather than raised from inside logging.
    settings = Config()
    # Every record of this process and of its worker processes is scrubbed; our modules
    # log to stderr (or LOG_FILE), and huey_consumer adds its own handler to "huey".
    configure_process_logging(settings.LOG_FILE or "-", settings.LOG_LEVEL)
    logging.getLogger("huey").propagate = False

    # A bounded ledger pool that every thread of the process shares (tasks.budget).
    app = create_app(consumer_config())
    _queues = app.extensions["queues"]
    # Huey's scheduler checks the periodic schedules once a minute; shorter periods (a
    # test that sweeps every few seconds) need it to look as often as the shortest one.
    check_periodic_every(_queues.periodic_tick())

    # Opened here: a queue the settings name but no process can open is refused too.
    default = _queues.huey("default")
    tasks = _queues.huey("tasks")
    builder = _queues.huey("builder")
    long_job = _queues.huey("long-job")
    io = _queues.huey("io")
except ConfigError as exc:
    raise refuse_config(exc) from None
