"""Entry module of the Huey consumers: ``huey_consumer tasks.consumer.<queue>``.

Importing it builds the app from the environment (which imports every job
module) and exposes one Huey instance per queue.
"""

import importlib
import logging
import os

from huey.consumer import Scheduler

from app import create_app
from security.logs import configure_logging

# Every record of this process and of its worker processes is scrubbed; our modules
# log to stderr (or LOG_FILE), and huey_consumer adds its own handler to "huey".
configure_logging(os.environ.get("LOG_FILE") or "-", os.environ.get("LOG_LEVEL", "INFO"))
logging.getLogger("huey").propagate = False

app = create_app()
# Extra modules whose ``init_app(app)`` registers more task types in this app (a
# deployment's plug-ins, or the task types a test declares): comma-separated names.
with app.app_context():
    for _name in filter(None, os.environ.get("TASKLEDGER_EXTRA_MODULES", "").split(",")):
        importlib.import_module(_name.strip()).init_app(app)
_queues = app.extensions["queues"]
# Huey's scheduler checks the periodic schedules once a minute; shorter periods (a test
# that sweeps every few seconds) need it to look as often as the shortest one.
Scheduler.periodic_task_seconds = _queues.periodic_tick()

default = _queues.huey("default")
tasks = _queues.huey("tasks")
builder = _queues.huey("builder")
long_job = _queues.huey("long-job")
io = _queues.huey("io")
