"""``make chaos``: a run of side-effecting units under fire, and the proof nothing was lost.

Three real consumers execute a ``diagnostics.effects`` run while the harness
SIGKILLs a random consumer every few seconds (starting a new one each time),
deletes the queue's pending jobs once (Redis), and takes PostgreSQL away once
(a restart where it has the rights, else ``pg_terminate_backend`` on every
other connection to the database). Then it does what an operator does: the
stuck sweep (``flask tasks detect-stuck``) and ``flask tasks retry`` until the
run is terminal, and checks the ledger, the side-effect table, the events and
the consumers. The test suite runs the same harness (``tests/chaos``).

Usage: ``python -m bench.chaos [--backend postgres|sqlite] [--units N]
[--pg-fault auto|restart|terminate|none]``. PostgreSQL database and Redis db come
from ``CHAOS_DATABASE_URL`` and ``CHAOS_REDIS_URL``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from diagnostics.effects import TYPE, effect_summary
from extensions import db
from harness import (
    ProcessPool,
    build_app,
    ensure_postgres_database,
    process_env,
    reset_postgres_schema,
)
from taskrunner import runner
from taskrunner.contract import TERMINAL_RUN, RunStatus
from taskrunner.ledger import ledger

# Lines a consumer writes when it, or one of its workers, fell over.
CRASH_MARKERS = ("died!", "died, restarting", "Error in consumer")
# Seconds a consumer needs to import the app and take work (on a busy 2-core machine).
BOOT_SECONDS = 2.5
# Lines showing a consumer met the database outage and carried on.
OUTAGE_MARKERS = (
    "OperationalError",
    "server closed the connection",
    "terminating connection",
    "connection failed",
    "Connection refused",
    "the database system is",
)


@dataclass
class ChaosPlan:
    units: int = 2000
    consumers: int = 3
    workers: int = 2
    sleep_ms: int = 40
    kill_every: float = 2.0
    kills_until: float = 0.85  # progress after which the kills stop, so the run can end calm
    wipe_at: float = 0.4  # progress of the run when the queue's pending jobs are deleted
    pg_fault: str = "terminate"  # restart | terminate | none
    pg_fault_at: float = 0.7
    outage_seconds: float = 2.0  # how long connections keep being dropped (terminate mode)
    timeout: float = 600.0
    seed: int | None = None


@dataclass
class ChaosReport:
    backend: str
    units: int
    run_uuid: str = ""
    status: str = ""
    seconds: float = 0.0
    kills: int = 0
    consumers_started: int = 0
    jobs_wiped: int = 0
    pg_fault: str = "none"
    harness_outage_errors: int = 0
    sweeps: int = 0
    lost_found: Counter = field(default_factory=Counter)
    failed_retried: int = 0
    lost_closes: int = 0
    retries: int = 0
    ledger_units: int = 0
    ledger_keys: int = 0
    ledger_status: Counter = field(default_factory=Counter)
    attempts_max: int = 0
    attempts_mean: float = 0.0
    snapshot: dict[str, int] = field(default_factory=dict)
    run_completed_events: int = 0
    run_failed_events: int = 0
    effect_rows: int = 0
    effect_units: int = 0
    executions_max: int = 0
    executions_mean: float = 0.0
    witnesses: int = 0
    witnesses_alive: int = 0
    witnesses_saw_outage: int = 0
    consumers_alive_unkilled: int = 0
    consumers_unkilled: int = 0
    crashes: list[str] = field(default_factory=list)
    log_dir: str = ""

    def violations(self) -> list[str]:
        """Every guarantee the run broke (empty: the ledger accounted for every unit)."""
        found = []
        if self.status != RunStatus.COMPLETED:
            found.append(f"run ended {self.status!r}, not completed")
        if self.ledger_units != self.units or self.ledger_keys != self.units:
            found.append(
                f"ledger holds {self.ledger_units} unit rows, {self.ledger_keys} keys "
                f"for {self.units} units"
            )
        if self.ledger_status.get("completed", 0) != self.units:
            found.append(f"units by status: {dict(self.ledger_status)}")
        if self.snapshot.get("completed") != self.units:
            found.append(f"run snapshot: {self.snapshot}")
        if self.run_completed_events != 1:
            found.append(f"tasks.run.completed recorded {self.run_completed_events} times")
        if self.effect_rows != self.units or self.effect_units != self.units:
            found.append(f"{self.effect_rows} side-effect rows for {self.units} units")
        if self.crashes:
            found.append("consumer crashes: " + "; ".join(self.crashes))
        if self.consumers_alive_unkilled != self.consumers_unkilled:
            found.append(
                f"{self.consumers_unkilled - self.consumers_alive_unkilled} consumers "
                "died without being killed"
            )
        if self.pg_fault != "none" and self.witnesses_alive != self.witnesses:
            found.append("a consumer did not survive the database outage")
        return found

    def table(self) -> str:
        lost = ", ".join(f"{n} {reason}" for reason, n in sorted(self.lost_found.items()))
        rows = [
            ("backend", self.backend),
            ("run", f"{self.run_uuid} ({self.status})"),
            ("units", f"{self.units}"),
            ("duration", f"{self.seconds:.1f} s"),
            ("consumers killed (SIGKILL)", f"{self.kills} ({self.consumers_started} started)"),
            ("queued jobs deleted", f"{self.jobs_wiped}"),
            ("database fault", self.pg_fault),
            (
                "lost units found by the sweep",
                f"{sum(self.lost_found.values())}" + (f" ({lost})" if lost else ""),
            ),
            ("units failed by the outage, retried", f"{self.failed_retried}"),
            ("runs found settled but open (close lost)", f"{self.lost_closes}"),
            ("stuck sweeps / retries needed", f"{self.sweeps} / {self.retries}"),
            (
                "ledger: units completed",
                f"{self.ledger_status.get('completed', 0)} "
                f"of {self.ledger_units} rows, {self.ledger_keys} keys",
            ),
            ("attempts per unit: max / mean", f"{self.attempts_max} / {self.attempts_mean:.3f}"),
            ("side-effect rows", f"{self.effect_rows} ({self.effect_units} units)"),
            (
                "executions per unit: max / mean",
                f"{self.executions_max} / {self.executions_mean:.3f}",
            ),
            (
                "tasks.run.completed / tasks.run.failed",
                f"{self.run_completed_events} / {self.run_failed_events}",
            ),
            (
                "consumers through the outage alive",
                f"{self.witnesses_alive} of {self.witnesses} "
                f"({self.witnesses_saw_outage} logged database errors)",
            ),
            ("harness reads refused during the outage", f"{self.harness_outage_errors}"),
            ("logs", self.log_dir),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"  {name:<{width}}  {value}" for name, value in rows]
        return "\n".join(["chaos summary", *lines])


class ChaosRun:
    """One run of the harness against the app's database and queue."""

    def __init__(
        self, app: Flask, plan: ChaosPlan, log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.app = app
        self.plan = plan
        self.pool = ProcessPool(env or process_env(app), log_dir)
        self.random = random.Random(plan.seed)
        self.huey = app.extensions["queues"].huey("tasks")
        self.redis = app.config["QUEUE_DRIVER"] == "redis"
        self.postgres = not app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite")
        backend = "PostgreSQL + Redis" if self.postgres else "SQLite + SqliteHuey"
        self.report = ChaosReport(backend=backend, units=plan.units, log_dir=str(log_dir))
        self.cli = app.test_cli_runner()
        self.witnesses: list[subprocess.Popen] = []
        self._settled_since: float | None = None
        self._born: dict[int, float] = {}

    # -- the run -------------------------------------------------------------------

    def execute(self) -> ChaosReport:
        from tasks.workers import consumer_command

        self.command = consumer_command("tasks", workers=self.plan.workers)
        started = time.monotonic()
        try:
            with self.app.app_context():
                for _ in range(self.plan.consumers):
                    self._start_consumer()
                handle = runner.start(
                    TYPE,
                    {
                        "units": self.plan.units,
                        "batch": uuid.uuid4().hex,
                        "sleep_ms": self.plan.sleep_ms,
                    },
                    "chaos",
                )
                self.report.run_uuid = handle.uuid
                self._drive(handle.uuid, started)
                self.report.seconds = time.monotonic() - started
                self._collect(handle.uuid)
        finally:
            self._check_consumers()
            self.pool.stop_all()
        return self.report

    def _drive(self, run_uuid: str, started: float) -> None:
        plan = self.plan
        next_kill = time.monotonic() + plan.kill_every
        wiped = faulted = False
        while True:
            if time.monotonic() - started > plan.timeout:
                raise TimeoutError(f"run {run_uuid} not completed after {plan.timeout:g} s")
            try:
                run = self._fresh_run(run_uuid)
                counts = ledger.counts.run_counts(run)
                db.session.rollback()
            except DBAPIError:
                db.session.rollback()
                self.report.harness_outage_errors += 1
                time.sleep(0.2)
                continue
            if run.status == RunStatus.COMPLETED:
                return
            if run.status in TERMINAL_RUN:
                self._retry_failed(run_uuid, run.status)
                continue
            done = counts["completed"] + counts["failed"] + counts["skipped"]
            progress = done / max(1, counts["total"])
            kills_on = progress < plan.kills_until and not faulted
            if kills_on and time.monotonic() >= next_kill:
                self._kill_one()
                next_kill = time.monotonic() + plan.kill_every
            if self.redis and not wiped and plan.wipe_at and progress >= plan.wipe_at:
                self._wipe_queue()
                wiped = True
            if (
                self.postgres
                and not faulted
                and plan.pg_fault != "none"
                and progress >= plan.pg_fault_at
            ):
                self._database_fault()
                faulted = True
            self._recover_if_only_lost_units_left(run_uuid, counts)
            time.sleep(0.2)

    def _fresh_run(self, run_uuid: str):
        db.session.rollback()
        return ledger.runs.get_run(run_uuid)

    # -- faults --------------------------------------------------------------------

    def _start_consumer(self) -> subprocess.Popen:
        self.report.consumers_started += 1
        process = self.pool.spawn(self.command, name="consumer")
        self._born[process.pid] = time.monotonic()
        return process

    def _kill_one(self) -> None:
        alive = self.pool.alive()
        # A consumer still importing the app holds no unit: prefer one that is working.
        booted = [p for p in alive if time.monotonic() - self._born[p.pid] > BOOT_SECONDS]
        if not alive:
            return
        self.pool.kill(self.random.choice(booted or alive))
        self.report.kills += 1
        self._start_consumer()

    def _wipe_queue(self) -> None:
        """Delete every job waiting in the queue, as a Redis flush or failover would."""
        storage = self.huey.storage
        pipe = storage.conn.pipeline(transaction=True)
        pipe.llen(storage.queue_key)
        pipe.delete(storage.queue_key)
        waiting, _ = pipe.execute()
        self.report.jobs_wiped = int(waiting)

    def _database_fault(self) -> None:
        mode = self.plan.pg_fault
        if mode == "auto":
            mode = "restart" if can_restart_postgres() else "terminate"
        self.witnesses = self.pool.alive()
        if mode == "restart":
            began = time.monotonic()
            restart_postgres()
            self.report.pg_fault = f"PostgreSQL restarted ({time.monotonic() - began:.1f} s)"
        else:
            # An outage window rather than one blow: connections made meanwhile drop too.
            dropped, until = 0, time.monotonic() + self.plan.outage_seconds
            while time.monotonic() < until:
                dropped += terminate_other_connections(self.app)
                time.sleep(0.1)
            self.report.pg_fault = (
                f"pg_terminate_backend for {self.plan.outage_seconds:g} s "
                f"({dropped} connections dropped)"
            )

    # -- what an operator does ------------------------------------------------------

    def _recover_if_only_lost_units_left(self, run_uuid: str, counts: dict[str, int]) -> None:
        """When the queue is empty and every unit left is stale: the sweep, then a retry."""
        active = counts["pending"] + counts["running"]
        if not active:
            # Every unit settled and the run still open after a worker's lost interval:
            # its close was lost with a worker, and the sweep closes it.
            self._settled_since = self._settled_since or time.monotonic()
            grace = 3 * self.app.config["TASK_RUNNER_HEARTBEAT_SECONDS"] + 1
            if time.monotonic() - self._settled_since > grace:
                self._invoke("tasks", "detect-stuck")
                self.report.sweeps += 1
                self.report.lost_closes = 1
            return
        self._settled_since = None
        if counts["stale"] != active or self.huey.pending_count():
            return
        self._invoke("tasks", "detect-stuck")
        self.report.sweeps += 1
        run = self._fresh_run(run_uuid)
        stale = ledger.runs.run_units_page(run, stale_only=True, limit=counts["total"]).items
        db.session.rollback()
        self.report.lost_found.update(unit["stale_reason"] for unit in stale)
        self._invoke("tasks", "retry", run_uuid)
        self.report.retries += 1

    def _retry_failed(self, run_uuid: str, status: str) -> None:
        """Units the outage failed (their job met the dead database) are retried as well."""
        run = self._fresh_run(run_uuid)
        self.report.failed_retried += run.units_failed
        db.session.rollback()
        self._invoke("tasks", "retry", run_uuid, "--failed-only")
        self.report.retries += 1

    def _invoke(self, *args: str) -> str:
        result = self.cli.invoke(args=list(args))
        if result.exit_code != 0:
            raise RuntimeError(
                f"flask {' '.join(args)} exited {result.exit_code}: "
                f"{result.output.strip()} {result.exception!r}"
            )
        return result.output

    # -- the evidence ----------------------------------------------------------------

    def _collect(self, run_uuid: str) -> None:
        report = self.report
        run = self._fresh_run(run_uuid)
        report.status = run.status
        report.snapshot = {
            "total": run.units_total,
            "completed": run.units_completed,
            "failed": run.units_failed,
            "skipped": run.units_skipped,
        }
        units = ledger.runs.run_units_page(run, limit=report.units + 1).items
        report.ledger_units = len(units)
        report.ledger_keys = len({u["unit_key"] for u in units})
        report.ledger_status = Counter(u["status"] for u in units)
        attempts = [u["attempts"] for u in units] or [0]
        report.attempts_max = max(attempts)
        report.attempts_mean = sum(attempts) / len(attempts)
        report.run_completed_events = ledger.runs.count_events("tasks.run.completed", run)
        report.run_failed_events = ledger.runs.count_events("tasks.run.failed", run)
        effects = effect_summary(run.context["batch"])
        report.effect_rows = effects["rows"]
        report.effect_units = effects["units"]
        report.executions_max = effects["max_executions"]
        report.executions_mean = effects["executions"] / max(1, report.units)
        db.session.rollback()

    def _check_consumers(self) -> None:
        report = self.report
        unkilled = [p for p in self.pool.processes if p.pid not in self.pool.killed]
        report.consumers_unkilled = len(unkilled)
        report.consumers_alive_unkilled = sum(1 for p in unkilled if p.poll() is None)
        report.witnesses = len(self.witnesses)
        report.witnesses_alive = sum(1 for p in self.witnesses if p.poll() is None)
        for process in self.pool.processes:
            log = self.pool.log_of(process)
            for marker in CRASH_MARKERS:
                if marker in log:
                    report.crashes.append(f"{Path(process.log_path).name}: {marker!r}")
            if process in self.witnesses and any(m in log for m in OUTAGE_MARKERS):
                report.witnesses_saw_outage += 1


# -- PostgreSQL faults ------------------------------------------------------------------


def postgres_cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster that ``pg_ctlcluster`` manages, if any."""
    if shutil.which("pg_ctlcluster") is None or not Path("/etc/postgresql").is_dir():
        return None
    versions = sorted(p.name for p in Path("/etc/postgresql").iterdir() if p.is_dir())
    for version in reversed(versions):
        if (Path("/etc/postgresql") / version / "main").is_dir():
            return version, "main"
    return None


def can_restart_postgres() -> bool:
    return postgres_cluster() is not None and os.geteuid() in (0, _postgres_uid())


def _postgres_uid() -> int:
    try:
        import pwd

        return pwd.getpwnam("postgres").pw_uid
    except KeyError:
        return -1


def restart_postgres(ready_timeout: float = 60.0) -> None:
    cluster = postgres_cluster()
    if cluster is None:
        raise RuntimeError("no local PostgreSQL cluster to restart")
    version, name = cluster
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "restart"],
        check=True,
        capture_output=True,
        timeout=ready_timeout,
    )
    deadline = time.monotonic() + ready_timeout
    while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("PostgreSQL did not come back after the restart")
        time.sleep(0.1)


def terminate_other_connections(app: Flask) -> int:
    """Drop every other connection to this database (the consumers', mid-transaction or not)."""
    with app.app_context():
        with db.engine.connect() as conn:
            dropped = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                    "FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
            conn.commit()
        db.engine.dispose()
    return int(dropped)


# -- make chaos ---------------------------------------------------------------------------


def chaos_config(backend: str, folder: Path) -> dict[str, Any]:
    config: dict[str, Any] = {
        "SECRET_KEY": "chaos",
        "INSTANCE_PATH": str(folder),
        "TASK_RUNNER_HEARTBEAT_SECONDS": 1,
        "TASK_RUNNER_NEVER_STARTED_SECONDS": 3,
        "LOG_FILE": str(folder / "harness.log"),
    }
    if backend == "postgres":
        url = os.environ.get(
            "CHAOS_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/taskledger_chaos"
        )
        ensure_postgres_database(url)
        reset_postgres_schema(url)  # the harness owns this database
        return config | {
            "SQLALCHEMY_DATABASE_URI": url,
            "QUEUE_DRIVER": "redis",
            "REDIS_URL": os.environ.get("CHAOS_REDIS_URL", "redis://127.0.0.1:6379/6"),
        }
    return config | {
        "SQLALCHEMY_DATABASE_URI": f"sqlite:///{folder / 'ledger.db'}",
        "QUEUE_DRIVER": "sqlite",
        "QUEUE_SQLITE_PATH": str(folder / "queue.sqlite3"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--backend",
        choices=["postgres", "sqlite"],
        default=os.environ.get("CHAOS_BACKEND", "postgres"),
    )
    parser.add_argument("--units", type=int, default=2000)
    parser.add_argument("--sleep-ms", type=int, default=40)
    parser.add_argument("--kill-every", type=float, default=2.0)
    parser.add_argument(
        "--pg-fault",
        choices=["auto", "restart", "terminate", "none"],
        default=os.environ.get("CHAOS_PG_FAULT", "auto"),
    )
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="chaos-"))
    app = build_app(chaos_config(args.backend, folder))
    with app.app_context():
        for huey in app.extensions["queues"].all().values():
            huey.flush()
    plan = ChaosPlan(
        units=args.units,
        sleep_ms=args.sleep_ms,
        kill_every=args.kill_every,
        pg_fault=args.pg_fault,
        seed=args.seed,
    )
    report = ChaosRun(app, plan, folder / "consumers").execute()
    print(report.table())
    broken = report.violations()
    for violation in broken:
        print(f"VIOLATION: {violation}", file=sys.stderr)
    if not broken:
        print("every unit accounted for: completed once in the ledger, one side effect each")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
