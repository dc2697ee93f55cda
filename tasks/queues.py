"""One Huey instance per queue, in the variant of ``QUEUE_DRIVER``.

Instances are made lazily, on first use, from the app's config: importing this
module opens nothing. Every job runs inside a fresh app context of the app that
owns the instance (the pattern of Flask's Celery example). Their connections to
Redis or PostgreSQL carry timeouts and keepalives, so a consumer cut off from its
server fails and retries rather than hanging on a dead socket.

Periodic tasks are registered on the ``default`` queue only; each carries the
schedule slot it was enqueued for and claims it through the app's slot keeper before it
works (``tasks.slots``); an operator's "run now" enqueues the same task with a slot of
its own, so it takes the same path.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import Flask
from huey import Huey, PostgresHuey, RedisHuey, SqliteHuey
from huey.signals import SIGNAL_EXPIRED, SIGNAL_INTERRUPTED
from redis import ConnectionPool

from config import ConfigError
from database import postgres_connect_args
from security.files import private_database
from tasks import presence
from tasks.gated_jobs import skip_revoke_cleanup
from tasks.huey_internals import (
    SharedPostgresStorage,
    SlottedPeriodicTask,
    WatchedSqliteStorage,
    last_read,
    patient_bookkeeping,
    serve_with,
    use_one_queue_connection,
    watch_stop_signal,
)
from tasks.interrupts import consumer_stop, raise_if_stopping
from tasks.routing import (
    PERIODIC_QUEUE,
    QUEUE_NAMES,
    PeriodicSpec,
    RouteError,
    read_type_routes,
    routes,
)
from tasks.schedules import DueSlots, tick_seconds
from tasks.slots import keeper, worker_identity

logger = logging.getLogger(__name__)


class QueueConfigError(Exception):
    pass


class QueueFileError(QueueConfigError, ConfigError):
    """The SQLite queue's file cannot be opened: a setting no process can run with (the
    consumers refuse it on one line), and a dispatch's reason that names it."""


def _make_huey(app: Flask, queue: str) -> Huey:
    huey = _huey_of_driver(app, queue)
    if not huey.immediate:
        patient_bookkeeping(huey)
    return huey


def _huey_of_driver(app: Flask, queue: str) -> Huey:
    driver = app.config["QUEUE_DRIVER"]
    name = f"taskledger.{queue}"
    common: dict[str, Any] = {"results": False, "utc": True}
    if app.config.get("QUEUE_IMMEDIATE"):
        return Huey(name, immediate=True, **common)
    if driver == "sqlite":
        path = sqlite_queue_path(app)
        try:
            filename = private_database(path)
            # A file replaced under a running consumer is noticed and reopened.
            return SqliteHuey(
                name,
                storage_class=WatchedSqliteStorage,
                filename=str(filename),
                timeout=30,
                **common,
            )
        except (OSError, sqlite3.Error) as exc:
            # Its folder missing or not ours, a folder named as the file, not a database.
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise QueueFileError(
                f"QUEUE_SQLITE_PATH: cannot open the queue file {str(path)!r} ({reason})"
            ) from None
    if driver == "redis":
        return RedisHuey(name, connection_pool=_redis_pool(app), **common)
    if driver == "postgres":
        dsn = libpq_dsn(app.config["SQLALCHEMY_DATABASE_URI"])  # the ledger's database
        # Two connections a process, whatever its threads or queues (tasks.budget).
        return PostgresHuey(
            name,
            storage_class=SharedPostgresStorage,
            dsn=dsn,
            application_name=app.config["DATABASE_APPLICATION_NAME"],
            **common,
            **postgres_connect_args(app.config),
        )
    raise QueueConfigError(f"QUEUE_DRIVER must be sqlite, redis or postgres, not {driver!r}")


def sqlite_queue_path(app: Flask) -> Path:
    """The SQLite queue's file: ``QUEUE_SQLITE_PATH``, a relative one inside the instance
    folder -- never the working directory, which differs between the CLI of an operator's
    shell and the consumers of a service, and would give each a file of its own."""
    path = Path(app.config["QUEUE_SQLITE_PATH"]).expanduser()
    return path if path.is_absolute() else Path(app.instance_path) / path


def _redis_pool(app: Flask) -> ConnectionPool:
    """One pool per app for every queue. A reply that does not come within the dead-peer
    time drops the connection (the next command opens a new one); Huey's blocking read
    waits 1 s, well inside it."""
    pool = app.extensions.get("queues_redis_pool")
    if pool is None:
        dead_peer = max(2, int(app.config["NETWORK_DEAD_PEER_SECONDS"]))
        pool = ConnectionPool.from_url(
            app.config["REDIS_URL"],
            socket_connect_timeout=max(1, int(app.config["NETWORK_CONNECT_TIMEOUT_SECONDS"])),
            socket_timeout=dead_peer,
            socket_keepalive=True,
            health_check_interval=max(1, dead_peer // 2),
        )
        app.extensions["queues_redis_pool"] = pool
    return pool


def libpq_dsn(url: str) -> str:
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    if url.startswith("postgresql://"):
        return url
    raise QueueConfigError("QUEUE_DRIVER=postgres needs a PostgreSQL DATABASE_URL")


class Queues:
    """The app's Huey instances and the jobs registered on them."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._hueys: dict[str, Huey] = {}
        self._tasks: dict[tuple[str, str], Any] = {}

    def huey(self, queue: str) -> Huey:
        if queue not in QUEUE_NAMES:
            raise QueueConfigError(f"unknown queue {queue!r}")
        if queue not in self._hueys:
            self._hueys[queue] = self._build(queue)
        return self._hueys[queue]

    def all(self) -> dict[str, Huey]:
        return {name: self.huey(name) for name in QUEUE_NAMES}

    def unread_file(self, queue: str) -> Path | None:
        """The SQLite queue's file when no consumer of ``queue``'s file said it read it
        within three heartbeats (what it was sent waits there until one does); None when
        one did, or off SQLite."""
        if self.app.config["QUEUE_DRIVER"] != "sqlite" or self.app.config.get("QUEUE_IMMEDIATE"):
            return None
        last = last_read(self.huey(queue))
        window = 3 * float(self.app.config["CONSUMER_HEARTBEAT_SECONDS"])
        if last is not None and time.time() - last <= window:
            return None
        return sqlite_queue_path(self.app)

    def task(self, job_name: str, queue: str | None = None) -> Any:
        """The Huey task wrapper of a job (on ``queue`` for jobs served by every queue)."""
        spec = routes.jobs[job_name]
        queue = spec.queue or queue or "default"
        self.huey(queue)
        return self._tasks[(queue, job_name)]

    def _build(self, queue: str) -> Huey:
        huey = _make_huey(self.app, queue)
        # Each process worker notes its stop signal, so an interrupt whose traceback a
        # library cut off is still told apart from a job's own failure.
        huey.on_startup("taskledger.watch_stop_signal")(watch_stop_signal)
        # A process worker holds one connection to the PostgreSQL queue, not two.
        huey.on_startup("taskledger.one_queue_connection")(
            functools.partial(use_one_queue_connection, huey)
        )
        # ``huey_consumer`` asks the instance for its consumer: ours registers itself.
        serve_with(huey, presence.consumer_factory(self.app, huey))
        skip_revoke_cleanup(
            huey, (s.name for s in routes.jobs.values() if s.gated and s.queue in (None, queue))
        )
        for spec in routes.jobs.values():
            if spec.queue in (None, queue):
                self._tasks[(queue, spec.name)] = huey.task(
                    name=spec.name,
                    retries=spec.retries,
                    retry_delay=spec.retry_delay,
                    retry_backoff=spec.retry_backoff,
                    timeout=spec.timeout,
                    context=True,
                )(self._in_app_context(spec.fn, spec.wants_task))
        if queue == PERIODIC_QUEUE:
            # Only the scheduler's process reads it: its checks are remembered there.
            owed = DueSlots(self.periodic_tick(), self.app.config)
            for pspec in routes.periodic.values():
                self._tasks[(queue, pspec.name)] = huey.task(
                    name=pspec.name,
                    timeout=pspec.timeout,
                    task_base=SlottedPeriodicTask,
                    due_slots=functools.partial(owed.due, pspec.name, pspec.schedule),
                )(self._once_per_slot(pspec))
        # A job's own hooks: its work handed back when the consumer stops mid-job (Huey's
        # stop interrupts a job and says so with this signal), or failed when Huey drops
        # it past its ``expires``.
        huey.signal(SIGNAL_INTERRUPTED)(self._hook("on_stop"))
        huey.signal(SIGNAL_EXPIRED)(self._hook("on_expire"))
        return huey

    def _in_app_context(self, fn: Any, wants_task: bool) -> Any:
        app = self.app

        @functools.wraps(fn)
        def run(*args: Any, task: Any = None, **kwargs: Any) -> Any:
            try:
                with app.app_context():
                    if wants_task:
                        kwargs["task"] = task
                    return fn(*args, **kwargs)
            except Exception as exc:
                # The context's teardown may raise in place of a stop that passed through
                # it (a session stopped inside its commit refuses the rollback): Huey must
                # still see the stop, to hand the work back.
                raise_if_stopping(exc)
                raise

        return run

    def periodic_tick(self) -> int:
        """Seconds between two checks of the schedules by a consumer's scheduler."""
        return tick_seconds((p.schedule for p in routes.periodic.values()), self.app.config)

    def enqueue_slot(self, name: str, slot: datetime, initiator: str) -> None:
        """Enqueue periodic task ``name`` for one slot now, as its scheduler would."""
        self._enqueue(name, [slot.isoformat()], slot.isoformat(), initiator)

    def _enqueue(self, name: str, slots: list[str], enqueued: str, initiator: str) -> None:
        self.huey(PERIODIC_QUEUE)
        self._tasks[(PERIODIC_QUEUE, name)](slots=slots, enqueued=enqueued, initiator=initiator)

    def _once_per_slot(self, pspec: PeriodicSpec) -> Any:
        app = self.app

        @functools.wraps(pspec.fn)
        def run(
            slot: str | None = None,
            slots: list[str] | None = None,
            enqueued: str | None = None,
            initiator: str = "schedule",
        ) -> None:
            # ``slot``: a job enqueued by an older version, one slot a job.
            owed = slots if slots is not None else [slot] if slot is not None else []
            with app.app_context():
                if not owed:  # called by hand, outside any schedule
                    pspec.fn()
                slot_keeper, host = keeper(app), worker_identity()
                queued_at = datetime.fromisoformat(enqueued) if enqueued else None
                for index, one in enumerate(owed):
                    at = datetime.fromisoformat(one)
                    claimed = ran = False
                    try:
                        # A stop raises wherever the worker is: in the pause check, the claim
                        # and the record of the body's end too. An operator's "run now" is
                        # asked for by hand: a pause does not hold it.
                        if initiator == "schedule" and slot_keeper.paused(pspec.name, at, host):
                            continue
                        if not slot_keeper.claim(pspec.name, at, host, queued_at, initiator):
                            logger.info(
                                "Periodic %s, slot %s: skipped (claimed by another)",
                                pspec.name,
                                one,
                            )
                            continue
                        claimed = True
                        result = pspec.fn(initiator=initiator) if pspec.starts else pspec.fn()
                        ran, run_uuid = True, getattr(result, "uuid", None)
                        slot_keeper.finished(pspec.name, at, None, run_uuid)
                    except BaseException as exc:
                        if consumer_stop(exc) is None:
                            if claimed and not ran:
                                slot_keeper.finished(pspec.name, at, exc, None)
                            raise
                        if ran:  # the body ran: its end is recorded, it is not run again
                            slot_keeper.finished(pspec.name, at, None, run_uuid)
                            again, said = False, "ran, its end recorded"
                        else:
                            # A deploy's stop: the slot runs again elsewhere.
                            again = slot_keeper.handed_back(pspec.name, at, host)
                            said = "handed back" if again else "stopped after its run was recorded"
                        # The slots this job still owed run elsewhere too.
                        if rest := owed[index if again else index + 1 :]:
                            self._enqueue(pspec.name, rest, enqueued or one, initiator)
                        logger.warning(
                            "Periodic %s, slot %s: %s on shutdown", pspec.name, one, said
                        )
                        raise_if_stopping(exc)  # to Huey as the stop, whatever carried it
                        raise
                    # After the body: a claim alone does not prove a run.
                    logger.info("Periodic %s, slot %s: ran", pspec.name, one)

        return run

    def _hook(self, name: str) -> Any:
        app = self.app

        def receive(signal: str, task: Any, *args: Any) -> None:
            spec = routes.jobs.get(task.name)
            hook = getattr(spec, name, None)
            if hook is None:
                return
            kwargs = dict(task.kwargs or {}, **({"task": task} if spec.wants_task else {}))
            with app.app_context():
                hook(*task.args, **kwargs)

        return receive


def queues() -> Queues:
    from flask import current_app

    return current_app.extensions["queues"]


def init_app(app: Flask) -> None:
    try:
        read_type_routes(app.config.get("TASK_RUNNER_TYPE_ROUTES") or "")
    except RouteError as exc:
        # Found only when a run is dispatched, every run of the type would be written and
        # failed ("dispatch failed: unknown queue"): refused where the app is built.
        raise ConfigError(f"TASK_RUNNER_TYPE_ROUTES: {exc}") from None
    app.extensions["queues"] = Queues(app)
