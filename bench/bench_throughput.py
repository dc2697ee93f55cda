"""Throughput of the task runner, side by side with its floor and its peer, in one run.

- the peer: a Celery group of 2,000 no-op tasks (prefork, the same concurrency, the
  same Redis server, results stored) against a 2,000-unit tracked run, each timed
  from its start until every task's result is stored / the run is closed with its
  ``tasks.run.completed`` event;
- the peer under load: the same two measurements again while a second copy of them
  (``--load-copy``: ours and Celery, each timed over and over) runs beside them on its
  own database and Redis dbs, so the ratio is the one of a busy machine;
- the I/O lane: 2,000 units that each wait 50 ms, on the process lane (``tasks``,
  ``-k process -w 2``) and on the I/O lane (``io``, ``-k thread -w 32``), start to
  close, with the CPU time and the peak RSS of each lane's consumer;
- the scaling shape: tracked no-op completion with 1, 2 and 4 worker processes;
- the embedded backend: tracked no-op completion on SQLite + SqliteHuey against bare
  SqliteHuey's no-op drain (Huey's defaults), then against bare SqliteHuey with its queue
  committing as ours does (``synchronous=NORMAL``): its no-op drain, and its drain paying
  the wrapper's two transactions (``bench/bare_sqlite_huey.py``), in the same run.

Databases ``BENCH_THROUGHPUT_DATABASE_URL`` (default ``…/bench_throughput``, reset
by the benchmark), Redis ``BENCH_THROUGHPUT_REDIS_URL`` (default db 6) for our
queues and ``BENCH_CELERY_REDIS_URL`` (default db 7) for Celery's broker and results;
the load copy's ``BENCH_LOAD_DATABASE_URL`` (default ``…/bench_throughput_load``),
``BENCH_LOAD_REDIS_URL`` (default db 8) and ``BENCH_LOAD_CELERY_REDIS_URL`` (default db 14).
Run alone: ``python -m bench.bench_throughput [--quick]``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import Flask

from bench.bench_runner import analyze, figure
from bench.figures import print_figures
from harness import (
    ProcessPool,
    build_app,
    fresh_postgres_app,
    huey_consumer,
    process_env,
    process_tree,
    wait_for,
)

DATABASE_URL = os.environ.get(
    "BENCH_THROUGHPUT_DATABASE_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/bench_throughput",
)
REDIS_URL = os.environ.get("BENCH_THROUGHPUT_REDIS_URL", "redis://127.0.0.1:6379/6")
CELERY_REDIS_URL = os.environ.get("BENCH_CELERY_REDIS_URL", "redis://127.0.0.1:6379/7")
# The load copy runs this module with these as its own three (``load_copy_env``).
LOAD_DATABASE_URL = os.environ.get(
    "BENCH_LOAD_DATABASE_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/bench_throughput_load",
)
LOAD_REDIS_URL = os.environ.get("BENCH_LOAD_REDIS_URL", "redis://127.0.0.1:6379/8")
LOAD_CELERY_REDIS_URL = os.environ.get("BENCH_LOAD_CELERY_REDIS_URL", "redis://127.0.0.1:6379/14")
WORKERS = 2
# Where a no-op unit's time goes, profiled by hand (not by each run): py-spy record at
# 200 Hz on both worker processes of a `-k process -w 2` consumer draining a probe run.
BREAKDOWN = (
    "Where a unit's time goes (py-spy on the worker processes, 2026-12-02, a shared "
    "machine at load 6-9; shares of the workers' samples, before -> after this round). "
    "PostgreSQL + Redis, on a units table never analyzed as in the peer measurement "
    "(this server runs without autovacuum): completion with its look for another "
    "active unit 40.5 % -> 24.2 %, the gate 20.4 -> 24.1, Huey's dequeue (BRPOP) "
    "9.5 -> 27.6, its revoke check (HMGET) 8.0 -> 18.4, its revoke-key delete after the "
    "job (HDEL) 12.6 -> 0, the rest of Huey (deserialize, signals, alarm, logging) "
    "3.8 -> 1.7, the wrapper's Python (job, heartbeat, tenant scope, registry, outages, "
    "app context) 5.0 -> 3.8; two thirds of the samples wait on a socket. The look "
    "sorted every active unit of the run while the table had no statistics (3-10 ms a "
    "completion at 4,000 units, 0.1-0.2 ms with any): a run that finds none now "
    "gathers them, and drained 98 -> 441 units/s in that profile. The revoke-key "
    "delete is skipped for unit jobs (their gate refuses a revoked dispatch). "
    "SQLite + SqliteHuey: dequeue (an exclusive transaction on the queue file, "
    "fsynced) 56.7 -> 67.4 %, the gate 14.8 -> 16.1, completion with its look "
    "8.2 -> 7.9, the revoke check 1.0 -> 1.6, the revoke-key delete (another exclusive "
    "transaction) 13.4 -> 0, the rest of Huey 2.7 -> 2.8, the wrapper 3.0 -> 4.1; "
    "173 -> 236 units/s under the profiler. What is left is the floor: one dequeue and "
    "one revoke check (bare Huey pays them too) and two ledger statements per unit. "
    "SQLite again on 2026-12-03 (py-spy --idle, both workers): the queue's fsynced commit "
    "was 25 % of a worker's samples and sleeping in SQLite's busy handler (1 ms and more "
    "for a lock held tens of microseconds) most of what remained. The queue now commits "
    "at synchronous=NORMAL as the ledger does, and a write transaction tries for the lock "
    "in 50 us to 2 ms steps: after, waiting for the lock 21.5 %, the ledger's commits "
    "(their WAL checkpoints fsync) 20.4, Huey's two log lines through the scrubber 15.3, "
    "the statements 10.5, the dequeue 9.8."
)
PEER_UNITS = 2_000
WAIT_MS = 50
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a consumer and its live workers."""
    total = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def rss_mb(pid: int) -> float:
    total = 0
    for member in process_tree(pid):
        try:
            total += int(Path(f"/proc/{member}/statm").read_text().split()[1])
        except OSError:
            continue
    return total * PAGE / 1024 / 1024


class ThroughputBench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.rate_n = 2_000 if quick else 5_000
        self.io_n = 500 if quick else 2_000
        self.log_dir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
        self.app = self._postgres_app()
        self.pool = ProcessPool(process_env(self.app), self.log_dir)
        self.values: dict[str, float] = {}

    def _postgres_app(self) -> Flask:
        app = fresh_postgres_app(
            DATABASE_URL, self.log_dir, QUEUE_DRIVER="redis", REDIS_URL=REDIS_URL
        )
        with app.app_context():
            for huey in app.extensions["queues"].all().values():
                huey.flush()
        return app

    def measure(self) -> dict[str, Any]:
        try:
            with self.app.app_context():
                self._peer()
                self._peer_under_load()
                self._io_lane()
                self._scaling()
            self._embedded()
        finally:
            self.pool.stop_all()
            with self.app.app_context():
                for huey in self.app.extensions["queues"].all().values():
                    huey.flush()
        return self._report()

    # -- helpers -----------------------------------------------------------------------

    def _consumer(self, command: list[str], warm_type: str | None = None) -> subprocess.Popen:
        """A consumer started and warmed by a 4-unit run (its boot is not measured)."""
        process = self.pool.spawn(command, name="consumer")
        if warm_type:
            self._timed_run(warm_type, {"units": 4})
        return process

    def _timed_run(
        self, type_: str, context: dict[str, Any], sample: Callable[[], None] | None = None
    ) -> float:
        """Seconds from ``start_run`` until the run is closed with its completion event."""
        from taskrunner import runner
        from taskrunner.ledger import ledger

        began = time.perf_counter()
        handle = runner.start(type_, context, "bench")

        def closed() -> bool:
            if sample:
                sample()
            ledger.session.rollback()
            run = ledger.runs.get_run(handle.uuid)
            return run.status != "running" and (
                ledger.runs.count_events("tasks.run.completed", run) == 1
            )

        wait_for(closed, timeout=900, interval=0.01, message=f"a {type_} run to close")
        elapsed = time.perf_counter() - began
        ledger.session.rollback()
        run = ledger.runs.get_run(handle.uuid)
        assert (run.status, run.units_completed) == ("completed", context["units"]), run.status
        return elapsed

    # -- the peer: Celery ----------------------------------------------------------------

    def _peer(self, suffix: str = "") -> None:
        from diagnostics.probe import TYPE

        # Both sides log warnings only (Celery's worker default; ``-q`` for Huey's
        # consumer): per-task log lines would be measured otherwise, on our side alone.
        ours = self._consumer(
            [*huey_consumer("tasks.consumer.tasks", WORKERS), "-q"], warm_type=TYPE
        )
        self.values[f"ours_2000{suffix}"] = self._timed_run(TYPE, {"units": PEER_UNITS})
        self.pool.stop(ours)
        with celery_worker(self.pool, CELERY_REDIS_URL):
            self.values[f"celery_2000{suffix}"] = celery_group(PEER_UNITS)

    def _peer_under_load(self) -> None:
        """``_peer`` again, while a second copy of it runs beside it, both sides at once."""
        env = load_copy_env()
        copies = []
        try:
            for side in ("ours", "celery"):
                ready = self.log_dir / f"load-{side}.ready"
                command = [sys.executable, "-m", "bench.bench_throughput", "--load-copy", side]
                copy = self.pool.spawn([*command, str(ready)], name=f"load-{side}", **env)
                copies.append((copy, ready))

            def loaded() -> bool:
                dead = [copy.args[-2] for copy, _ready in copies if copy.poll() is not None]
                assert not dead, f"the load copy of {dead} stopped: see {self.log_dir}"
                return all(ready.exists() for _copy, ready in copies)

            wait_for(loaded, timeout=300, interval=0.1, message="the load copy to run")
            self._peer(suffix="_loaded")
            still = [copy.args[-2] for copy, _ready in copies if copy.poll() is None]
            assert len(still) == 2, f"the load copy stopped while measured: see {self.log_dir}"
        finally:
            for copy, _ready in copies:
                self.pool.stop(copy, grace=60)

    # -- the I/O lane ------------------------------------------------------------------

    def _io_lane(self) -> None:
        from diagnostics.probe import TYPE, VENDOR_TYPE
        from tasks.workers import consumer_command

        lanes = (
            ("process", TYPE, huey_consumer("tasks.consumer.tasks", WORKERS)),
            ("io", VENDOR_TYPE, consumer_command("io")),
        )
        for lane, type_, command in lanes:
            process = self._consumer(command, warm_type=type_)
            peak = [rss_mb(process.pid)]
            last = [0.0]

            def sample(
                pid: int = process.pid, peak: list[float] = peak, last: list[float] = last
            ) -> None:
                now = time.monotonic()
                if now - last[0] > 0.1:
                    last[0] = now
                    peak[0] = max(peak[0], rss_mb(pid))

            cpu = cpu_seconds(process.pid)
            seconds = self._timed_run(type_, {"units": self.io_n, "sleep_ms": WAIT_MS}, sample)
            self.values[f"{lane}_lane_seconds"] = seconds
            self.values[f"{lane}_lane_cpu"] = cpu_seconds(process.pid) - cpu
            self.values[f"{lane}_lane_rss"] = peak[0]
            self.pool.stop(process)

    # -- scaling -------------------------------------------------------------------------

    def _scaling(self) -> None:
        from diagnostics.probe import TYPE, ProbeTask
        from taskrunner import dispatch as dispatching
        from taskrunner.ledger import ledger

        huey = self.app.extensions["queues"].huey("tasks")
        for workers in (1, 2, 4):
            context = {"units": self.rate_n}
            dispatch = ledger.transitions.create_run(
                TYPE, context, "bench", ProbeTask().units(context), 5000
            )
            analyze()
            dispatching.enqueue_dispatch(dispatch)

            def closed(run_uuid: str = dispatch.run_uuid) -> bool:
                ledger.session.rollback()
                return ledger.runs.get_run(run_uuid).status != "running"

            self.values[f"scale_{workers}"] = drain_rate(
                self.pool, huey, self.rate_n, huey_consumer("tasks.consumer.tasks", workers), closed
            )

    # -- the embedded backend ------------------------------------------------------------

    def _embedded(self) -> None:
        folder = self.log_dir / "embedded"
        folder.mkdir()
        app = build_app(
            {
                "SQLALCHEMY_DATABASE_URI": f"sqlite:///{folder / 'ledger.db'}",
                "QUEUE_DRIVER": "sqlite",
                "QUEUE_SQLITE_PATH": str(folder / "queue.sqlite3"),
                "SECRET_KEY": "bench",
                "INSTANCE_PATH": str(folder),
                "LOG_FILE": str(folder / "bench.log"),
            }
        )
        bare_path, normal_path = folder / "bare.sqlite3", folder / "bare-normal.sqlite3"
        bare_ledger = folder / "bare-ledger.db"
        with sqlite3.connect(folder / "ledger.db") as source, sqlite3.connect(bare_ledger) as copy:
            source.backup(copy)  # the migrated ledger, before any run: every table and index
        env = process_env(
            app, BENCH_BARE_SQLITE_PATH=str(bare_path), BENCH_BARE_SQLITE_LEDGER=str(bare_ledger)
        )
        pool = ProcessPool(env, folder / "logs")
        from bench import bare_sqlite_huey

        try:
            consumer = huey_consumer("bench.bare_sqlite_huey.huey", WORKERS)
            bare, noop, _ = bare_sqlite_huey.make(str(bare_path))
            for i in range(self.rate_n):
                noop(i)
            self.values["sqlite_bare_noop"] = drain_rate(
                pool, bare, self.rate_n, consumer, lambda: bare.pending_count() == 0
            )
            # Bare Huey again, its queue committing as ours does (synchronous=NORMAL).
            as_ours = {"BENCH_BARE_SQLITE_PATH": str(normal_path), "BENCH_BARE_SQLITE_NORMAL": "1"}
            same, same_noop, transactions = bare_sqlite_huey.make(
                str(normal_path), str(bare_ledger), normal=True
            )
            for i in range(self.rate_n):
                same_noop(i)
            self.values["sqlite_same_noop"] = drain_rate(
                pool, same, self.rate_n, consumer, lambda: same.pending_count() == 0, **as_ours
            )
            run_id, token, unit_ids = bare_sqlite_huey.seed(bare_ledger, self.rate_n)
            for unit_id in unit_ids:
                transactions(run_id, unit_id, token)
            self.values["sqlite_bare_tx"] = drain_rate(
                pool,
                same,
                self.rate_n,
                consumer,
                lambda: bare_sqlite_huey.completed(bare_ledger, run_id) == self.rate_n,
                **as_ours,
            )
            with app.app_context():
                from diagnostics.probe import TYPE, ProbeTask
                from taskrunner import dispatch as dispatching
                from taskrunner.ledger import ledger

                context = {"units": self.rate_n}
                dispatch = ledger.transitions.create_run(
                    TYPE, context, "bench", ProbeTask().units(context), 5000
                )
                dispatching.enqueue_dispatch(dispatch)
                ours = app.extensions["queues"].huey("tasks")

                def closed() -> bool:
                    ledger.session.rollback()
                    return ledger.runs.get_run(dispatch.run_uuid).status != "running"

                self.values["sqlite_tracked"] = drain_rate(
                    pool, ours, self.rate_n, huey_consumer("tasks.consumer.tasks", WORKERS), closed
                )
                ledger.session.rollback()
                run = ledger.runs.get_run(dispatch.run_uuid)
                assert (run.status, run.units_completed) == ("completed", self.rate_n)
                from extensions import db

                db.session.remove()
                db.engine.dispose()
        finally:
            pool.stop_all()

    # -- the figures ---------------------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        v = self.values
        peer_ratio = v["ours_2000"] / v["celery_2000"]
        loaded_ratio = v["ours_2000_loaded"] / v["celery_2000_loaded"]
        io_ratio = v["process_lane_seconds"] / v["io_lane_seconds"]
        sqlite_ratio = v["sqlite_tracked"] / v["sqlite_bare_noop"]
        io_label = f"{self.io_n:,}-unit run of {WAIT_MS} ms waits"
        figures = [
            figure(
                f"ours: {PEER_UNITS:,}-unit no-op run, start to closed with event",
                v["ours_2000"],
                "s",
            ),
            figure(
                f"Celery: group of {PEER_UNITS:,} no-op tasks, start to every result stored",
                v["celery_2000"],
                "s",
            ),
            figure(
                "ours / Celery, same 2,000 no-ops", peer_ratio, "×", "≤ 0.6 ×", peer_ratio <= 0.6
            ),
            figure(
                f"under load: ours, {PEER_UNITS:,}-unit no-op run, a second copy beside it",
                v["ours_2000_loaded"],
                "s",
            ),
            figure(
                f"under load: Celery, group of {PEER_UNITS:,} no-ops, a second copy beside it",
                v["celery_2000_loaded"],
                "s",
            ),
            figure(
                "under load: ours / Celery, same 2,000 no-ops",
                loaded_ratio,
                "×",
                "≤ 0.6 ×",
                loaded_ratio <= 0.6,
            ),
            figure(f"{io_label}: process lane (-w 2)", v["process_lane_seconds"], "s"),
            figure(f"{io_label}: I/O lane (threads -w 32)", v["io_lane_seconds"], "s"),
            figure(
                "I/O lane speed-up over the process lane",
                io_ratio,
                "×",
                "≥ 6 ×",
                io_ratio >= 6,
                digits=1,
            ),
            figure(
                "process lane: consumer CPU during its run", v["process_lane_cpu"], "s", digits=2
            ),
            figure("I/O lane: consumer CPU during its run", v["io_lane_cpu"], "s", digits=2),
            figure("process lane: consumer peak RSS", v["process_lane_rss"], "MB", digits=0),
            figure("I/O lane: consumer peak RSS", v["io_lane_rss"], "MB", digits=0),
            *(
                figure(
                    f"tracked no-op completion, {w} worker process{'es' if w > 1 else ''}",
                    v[f"scale_{w}"],
                    "units/s",
                    digits=0,
                )
                for w in (1, 2, 4)
            ),
            figure(
                "SQLite + SqliteHuey: bare no-op drain", v["sqlite_bare_noop"], "tasks/s", digits=0
            ),
            figure(
                "SQLite + SqliteHuey: tracked no-op completion",
                v["sqlite_tracked"],
                "units/s",
                digits=0,
            ),
            figure(
                "SQLite: tracked completion / bare no-op drain",
                sqlite_ratio * 100,
                "%",
                "≥ 35 %",
                sqlite_ratio >= 0.35,
                digits=1,
            ),
            # The same drains with bare Huey's queue committing as ours does: what the
            # queue's setting gives, and what the wrapper costs beyond its transactions.
            figure(
                "SQLite: bare no-op drain, its queue at synchronous=NORMAL as ours",
                v["sqlite_same_noop"],
                "tasks/s",
                digits=0,
            ),
            figure(
                "SQLite: tracked completion / bare no-op drain, the queue as ours",
                v["sqlite_tracked"] / v["sqlite_same_noop"] * 100,
                "%",
                digits=1,
            ),
            figure(
                "SQLite: bare drain, the wrapper's two transactions per task, the queue as ours",
                v["sqlite_bare_tx"],
                "tasks/s",
                digits=0,
            ),
            figure(
                "SQLite: tracked completion / bare with the same transactions and queue",
                v["sqlite_tracked"] / v["sqlite_bare_tx"] * 100,
                "%",
                digits=1,
            ),
        ]
        notes = (
            f"Consumers `-k process -w {WORKERS}` unless named; Celery `worker -P prefork "
            f"-c {WORKERS}` with its Redis result backend, measured right after ours on the "
            "same machine; both sides' consumers were up and warm before the clock started, "
            "both logging warnings only (ours `-q`, Celery's default level). "
            f"Scaling and SQLite rates: {self.rate_n:,} tasks, from the first dequeue until "
            "the run closed (or the queue emptied). The machine has 2 cores shared with "
            "PostgreSQL and Redis, so 4 worker processes cannot scale past 2. Under load: "
            "the same two measurements while a second copy of them (ours and Celery, each "
            "run over and over, warm before the clock started) ran beside them on its own "
            "database and Redis dbs. " + BREAKDOWN + " Logs: " + str(self.log_dir)
        )
        return {"figures": figures, "notes": notes}


def drain_rate(
    pool: ProcessPool, huey, n: int, command: list[str], done: Callable[[], bool], **env: str
) -> float:
    """Tasks per second from the first dequeue until ``done``, on one fresh consumer."""
    assert huey.pending_count() == n, "the queue must hold exactly the measured tasks"
    process = pool.spawn(command, name="consumer", **env)

    def dequeued() -> tuple[int] | None:
        waiting = huey.pending_count()
        return (waiting,) if waiting < n else None

    (left,) = wait_for(dequeued, timeout=120, interval=0.002, message="the first dequeue")
    began = time.perf_counter()
    wait_for(done, timeout=900, interval=0.005, message="the drain")
    elapsed = time.perf_counter() - began
    pool.stop(process)
    return left / elapsed


@contextmanager
def celery_worker(pool: ProcessPool, url: str) -> Iterator[None]:
    """A warm Celery prefork worker on ``url`` (this process's peer client too), then gone."""
    os.environ["BENCH_CELERY_REDIS_URL"] = url
    import redis

    from bench import celery_peer

    assert celery_peer.REDIS_URL == url, "one Celery Redis per process"
    redis.Redis.from_url(url).flushdb()
    worker = pool.spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.celery_peer",
            "worker",
            "-P",
            "prefork",
            "-c",
            str(WORKERS),
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        name="celery",
        BENCH_CELERY_REDIS_URL=url,  # the pool's environment predates it
    )
    try:
        celery_peer.noop.delay(0).get(timeout=120)  # the worker is up and warm
        yield
    finally:
        pool.stop(worker, grace=10)
        redis.Redis.from_url(url).flushdb()


def celery_group(n: int) -> float:
    """Seconds for a Celery group of ``n`` no-ops, until every result is in."""
    from celery import group

    from bench import celery_peer

    began = time.perf_counter()
    result = group(celery_peer.noop.s(i) for i in range(n)).apply_async()
    result.get(timeout=900)
    elapsed = time.perf_counter() - began
    assert result.successful() and len(result.results) == n
    return elapsed


# -- the load copy ---------------------------------------------------------------------


def load_copy_env() -> dict[str, str]:
    """The load copy's environment: this module's three stores, each its own."""
    return {
        "BENCH_THROUGHPUT_DATABASE_URL": LOAD_DATABASE_URL,
        "BENCH_THROUGHPUT_REDIS_URL": LOAD_REDIS_URL,
        "BENCH_CELERY_REDIS_URL": LOAD_CELERY_REDIS_URL,
    }


def load_copy(side: str, ready: Path) -> None:
    """One side of the peer comparison (``ours`` or ``celery``), timed over and over until
    SIGINT or SIGTERM; ``ready`` is made once its first round is done (the side is warm)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if side == "ours":
        from diagnostics.probe import TYPE

        bench = ThroughputBench(quick=True)
        try:
            with bench.app.app_context():
                bench._consumer([*huey_consumer("tasks.consumer.tasks", WORKERS), "-q"], TYPE)
                while True:
                    bench._timed_run(TYPE, {"units": PEER_UNITS})
                    ready.touch()
        except KeyboardInterrupt:
            pass
        finally:
            bench.pool.stop_all()
        return
    pool = ProcessPool(os.environ.copy(), Path(tempfile.mkdtemp(prefix="bench-load-celery-")))
    try:
        with celery_worker(pool, CELERY_REDIS_URL):
            while True:
                celery_group(PEER_UNITS)
                ready.touch()
    except KeyboardInterrupt:
        pass
    finally:
        pool.stop_all()


def run(quick: bool = False) -> dict[str, Any]:
    return ThroughputBench(quick).measure()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--load-copy"]:
        load_copy(sys.argv[2], Path(sys.argv[3]))
        sys.exit(0)
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
