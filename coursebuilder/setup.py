from __future__ import annotations

from flask import Flask

import coursebuilder.models  # noqa: F401 - the tables, for migrations and the drift test
import coursebuilder.service  # noqa: F401 - declares the step job on the builder queue


def init_app(_app: Flask) -> None:
    """Nothing to bind: importing the modules declared the tables and the step job."""
