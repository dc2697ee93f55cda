"""Entry module of the Huey consumers: ``huey_consumer tasks.consumer.<queue>``.

Importing it builds the app from the environment (which imports every job
module) and exposes one Huey instance per queue.
"""

import importlib
import logging
import os

from app import create_app

# Our modules log through the root logger; huey_consumer adds its own handler to "huey".
logging.basicConfig(
    level=os.environ.get("LOG_LEVEL", "INFO"),
    format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
)
logging.getLogger("huey").propagate = False

app = create_app()
# Extra modules whose ``init_app(app)`` registers more task types in this process (a
# deployment's plug-ins, or the task types a test declares): comma-separated names.
for _name in filter(None, os.environ.get("TASKLEDGER_EXTRA_MODULES", "").split(",")):
    importlib.import_module(_name.strip()).init_app(app)
_queues = app.extensions["queues"]

default = _queues.huey("default")
tasks = _queues.huey("tasks")
builder = _queues.huey("builder")
long_job = _queues.huey("long-job")
