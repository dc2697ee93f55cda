"""Bare Huey on SqliteHuey: the embedded backend's floor (``bench.bare_sqlite_huey.huey``).

The consumer's file comes from ``BENCH_BARE_SQLITE_PATH``; the benchmark makes its own
instance on the same file with ``make`` (each of its runs uses a new file). ``noop``
does nothing.
"""

from __future__ import annotations

import os
from typing import Any

from huey import SqliteHuey

NAME = "taskledger.bench-bare"


def make(path: str) -> tuple[SqliteHuey, Any]:
    """A SqliteHuey on ``path`` and its no-op task."""
    instance = SqliteHuey(NAME, filename=path, timeout=30, results=False, utc=True)

    @instance.task(name="bench.noop")
    def noop(i: int) -> None:
        return None

    return instance, noop


huey, noop = make(os.environ.get("BENCH_BARE_SQLITE_PATH", "/tmp/taskledger-bench-bare.sqlite3"))
