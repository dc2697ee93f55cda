"""Entry module of the Huey consumers: ``huey_consumer tasks.consumer.<queue>``.

Importing it builds the app from the environment (which imports every job
module) and exposes one Huey instance per queue.
"""

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
_queues = app.extensions["queues"]

default = _queues.huey("default")
tasks = _queues.huey("tasks")
builder = _queues.huey("builder")
long_job = _queues.huey("long-job")
