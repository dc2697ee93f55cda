"""How much a process of the project costs before its first job, command or request.

A consumer, a ``flask`` command and a web worker each import the app and build it
(``create_app``) first; the test suite starts hundreds of them. Measured as the CPU time
of a fresh interpreter doing that (the median of its samples), beside the floor measured
in the same run: a fresh interpreter importing only the libraries every such process
needs. CPU time, not wall time: the machine is shared, and a process waiting its turn
is not slower.
"""

from __future__ import annotations

import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.figures import print_figures

ROOT = Path(__file__).resolve().parent.parent
FLOOR = (
    "import flask, flask_sqlalchemy, flask_login, flask_wtf, sqlalchemy.orm, psycopg, huey, redis"
)
PROJECT = "import app; app.create_app()"
# Never imported by a process that does not use them (tests/unit/test_app_factory.py).
AVOIDED = ("alembic", "httpx", "urllib3")


def cpu_seconds(code: str, instance: str) -> tuple[float, list[str]]:
    """The CPU time of a fresh interpreter running ``code``, and which of ``AVOIDED`` it
    imported."""
    probe = (
        f"{code}\nimport sys, time\n"
        f"print(time.process_time(), *[m for m in {AVOIDED!r} if m in sys.modules])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "QUEUE_"))}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**env, "INSTANCE_PATH": instance, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seconds, *imported = done.stdout.split()
    return float(seconds), imported


def run(quick: bool = False) -> dict[str, Any]:
    samples = 5 if quick else 15
    # As installed (pip compiles what it installs), whether or not this shell writes bytecode.
    compileall.compile_dir(ROOT, quiet=1, rx=re.compile(r"/(\.[^/]+|node_modules|build)/"))
    floor, project, imported = [], [], set()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as instance:
        for _ in range(samples):  # interleaved: a load that comes and goes meets both
            floor.append(cpu_seconds(FLOOR, instance)[0])
            seconds, found = cpu_seconds(PROJECT, instance)
            project.append(seconds)
            imported.update(found)
    ours, bare = statistics.median(project), statistics.median(floor)
    figures = [
        figure("process start: import and build the app (CPU)", ours * 1000, "ms"),
        figure("floor: import the libraries it needs (CPU)", bare * 1000, "ms"),
        figure("the project's own share of a start", (ours - bare) * 1000, "ms"),
        figure("process start / floor", ours / bare, "×"),
    ]
    notes = (
        f"{samples} fresh interpreters each, interleaved, the project's modules compiled as an "
        f"install has them; medians of their CPU time. The "
        f"floor imports {FLOOR.removeprefix('import ')}. Imported by the app's start, of "
        f"those it must not need: {', '.join(sorted(imported)) or 'none'}."
    )
    return {"figures": figures, "notes": notes}


def figure(name: str, value: float, unit: str) -> dict[str, Any]:
    return {"name": name, "value": round(value, 2), "unit": unit, "target": "", "ok": None}


if __name__ == "__main__":
    print_figures(run(quick="--quick" in sys.argv))
