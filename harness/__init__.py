"""The one process harness of the tests, the chaos run and the benchmarks.

Start consumers exactly as ``flask workers`` does (``processes``), serve the app from
a real gunicorn (``processes.WebServer``), wait for a condition (``waiting``), and make
or empty a database (``databases``). Not part of the app: nothing in it is installed.
"""

from harness.databases import (
    build_app,
    ensure_postgres_database,
    fresh_postgres_app,
    reset_postgres_schema,
)
from harness.environment import ROOT, process_env
from harness.processes import (
    GUNICORN_CONFIG,
    ProcessPool,
    WebServer,
    free_port,
    huey_consumer,
    process_tree,
    signal_group,
    stop_processes,
)
from harness.waiting import WaitTimeout, wait_for

__all__ = [
    "GUNICORN_CONFIG",
    "ROOT",
    "ProcessPool",
    "WaitTimeout",
    "WebServer",
    "build_app",
    "ensure_postgres_database",
    "free_port",
    "fresh_postgres_app",
    "huey_consumer",
    "process_tree",
    "process_env",
    "reset_postgres_schema",
    "signal_group",
    "stop_processes",
    "wait_for",
]
