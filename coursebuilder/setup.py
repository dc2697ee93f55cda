from __future__ import annotations

from flask import Flask

import coursebuilder.models  # noqa: F401 - the tables, for migrations and the drift test
from coursebuilder import service  # declares the step job on the builder queue
from taskrunner.contract import Cron, crontab, periodic


@periodic("coursebuilder.recover", Cron(crontab(minute="*/5")), timeout=300)
def recover_builder_runs() -> None:
    """Queue again the course-builder steps whose job or worker was lost."""
    service.recover()


def init_app(_app: Flask) -> None:
    """Nothing to bind: importing the modules declared the tables, the step job and the
    recovery schedule."""
