from __future__ import annotations

from flask import Flask

import coursebuilder.jobs  # noqa: F401 - declares the step job and the recovery schedule
import coursebuilder.models  # noqa: F401 - the tables, for migrations and the drift test


def init_app(_app: Flask) -> None:
    """Nothing to bind: importing the modules declared the tables, the step job and the
    recovery schedule."""
