"""Consumers register themselves and heartbeat: who serves which queue, doing what.

Every Huey consumer process (``huey_consumer`` per queue, or the lean consumer)
upserts one row of ``consumers`` when it starts and every
``CONSUMER_HEARTBEAT_SECONDS`` after: host, pid, queues, worker type and count,
and what each of its workers is executing now. That is one statement per beat per
consumer, never one per task: workers write what they run into memory shared with
the consumer process (``Board``, made before the workers fork), from Huey's own
``executing`` and ``complete``/``error``/… signals, and the consumer's heartbeat
thread reads it. A consumer stopped cleanly deletes its row; one killed stops
beating, is shown as lost after three beats, and is forgotten after
``CONSUMER_RETENTION_MINUTES`` by the next beat of any consumer.

The row lives in the ledger's database, so it works with every queue driver and
any number of hosts. The heartbeat thread of a consumer of process workers uses its
own engine without a pool: a worker the consumer forks again after a crash must not
inherit an open connection. Thread workers fork nothing, and share one bounded pool.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask
from huey import Huey
from huey import signals as S
from sqlalchemy import JSON, Engine, Index, Integer, String, create_engine, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.pool import NullPool

from config import CONSUMER_LOST_AFTER_BEATS
from database import configure_engine, engine_options, epoch, name_connections, utcnow
from extensions import db
from processes import process_alive
from tasks import outages
from tasks.huey_internals import ObservedConsumer, mark_reader

logger = logging.getLogger(__name__)

# Signals after which a worker is no longer executing the task it announced.
DONE_SIGNALS = (
    S.SIGNAL_COMPLETE,
    S.SIGNAL_ERROR,
    S.SIGNAL_INTERRUPTED,
    S.SIGNAL_TIMEOUT,
    S.SIGNAL_CANCELED,
    S.SIGNAL_RATE_LIMITED,
    S.SIGNAL_LOCKED,
    S.SIGNAL_RETRYING,
)
SLOT_BYTES = 256
# The newest worker deaths a consumer's row keeps (its count keeps them all).
KEPT_DEATHS = 20
LOST_AFTER_BEATS = CONSUMER_LOST_AFTER_BEATS
# How long a stop waits for a beat under way (one upsert, waiting for a busy database).
STOP_WAIT_SECONDS = 10
# A beat is one upsert; forgetting long-lost consumers is done at most once a minute.
FORGET_EVERY = timedelta(minutes=1)


class ConsumerPresence(db.Model):
    __tablename__ = "consumers"

    id: Mapped[str] = mapped_column(String(191), primary_key=True)
    host: Mapped[str] = mapped_column(String(191))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[list] = mapped_column(JSON, default=list)
    worker_type: Mapped[str] = mapped_column(String(16))
    workers: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    # What each worker executes now: [{"pid", "thread", "task", "task_id", "since"}].
    running: Mapped[list] = mapped_column(JSON, default=list)
    # Process workers found dead and restarted: how many, and the newest few
    # [{"at", "pid", "task_id"}] (what each was executing when it died).
    worker_deaths: Mapped[int | None] = mapped_column(Integer)
    deaths: Mapped[list | None] = mapped_column(JSON)

    __table_args__ = (Index("ix_consumers_heartbeat_at", "heartbeat_at"),)


class Board:
    """Fixed slots in shared memory, one per worker, holding what it executes now.

    Made in the consumer process before its workers start (forked processes, threads
    or greenlets all see it); each worker claims a slot by its pid and thread on its
    first task and rewrites only that slot.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._memory = multiprocessing.Array(ctypes.c_char, slots * SLOT_BYTES)
        self._mine: dict[str, int] = {}

    @staticmethod
    def _owner() -> str:
        return f"{os.getpid()}.{threading.get_ident()}"

    def _read_slot(self, index: int) -> list[str]:
        raw = self._memory[index * SLOT_BYTES : (index + 1) * SLOT_BYTES].rstrip(b"\0")
        return raw.decode("utf-8", "replace").split("|") if raw else []

    def _write_slot(self, index: int, fields: Iterable[str]) -> None:
        raw = "|".join(f.replace("|", "/") for f in fields).encode()[:SLOT_BYTES]
        self._memory[index * SLOT_BYTES : (index + 1) * SLOT_BYTES] = raw.ljust(SLOT_BYTES, b"\0")

    def _slot(self) -> int | None:
        owner = self._owner()
        index = self._mine.get(owner)
        if index is not None:
            return index
        with self._memory.get_lock():
            free = None
            for i in range(self.slots):
                fields = self._read_slot(i)
                if fields and fields[0] == owner:
                    free = i
                    break
                if not fields and free is None:
                    free = i
            if free is None:
                return None  # more workers than slots: this one is not shown
            self._write_slot(free, (owner, "", "", ""))
        self._mine[owner] = free
        return free

    def executing(self, _signal: str, task: Any, *_args: Any) -> None:
        index = self._slot()
        if index is not None:
            # The ledger's clock (the database's), as every time the workers page compares.
            self._write_slot(index, (self._owner(), task.name, task.id, f"{epoch():.3f}"))

    def done(self, _signal: str, task: Any, *_args: Any) -> None:
        index = self._slot()
        if index is not None:
            self._write_slot(index, (self._owner(), "", "", ""))

    def forget_dead(self) -> list[dict[str, Any]]:
        """Free the slots of worker processes that are gone (a crashed worker, restarted);
        return each death: when it was found, the pid and the task it was executing."""
        deaths = []
        with self._memory.get_lock():
            for i in range(self.slots):
                fields = self._read_slot(i)
                if fields and not process_alive(int(fields[0].split(".")[0])):
                    deaths.append(
                        {
                            "at": utcnow().isoformat(timespec="seconds") + "Z",
                            "pid": int(fields[0].split(".")[0]),
                            "task_id": fields[2] if len(fields) > 2 else "",
                        }
                    )
                    self._memory[i * SLOT_BYTES : (i + 1) * SLOT_BYTES] = b"\0" * SLOT_BYTES
        return deaths

    def read(self) -> list[dict[str, Any]]:
        """What every worker executes now (idle workers are left out)."""
        running = []
        for i in range(self.slots):
            fields = self._read_slot(i)
            if len(fields) == 4 and fields[1]:
                pid, _, thread = fields[0].partition(".")
                since = datetime.fromtimestamp(float(fields[3]), UTC).replace(tzinfo=None)
                running.append(
                    {
                        "pid": int(pid),
                        "thread": int(thread),
                        "task": fields[1],
                        "task_id": fields[2],
                        "since": since.isoformat(timespec="seconds") + "Z",
                    }
                )
        return running


class Presence:
    """One consumer's row: registered at start, beaten by a thread, deleted at stop."""

    def __init__(
        self,
        app: Flask,
        queues: list[str],
        worker_type: str,
        workers: int,
        board: Board,
        hueys: Iterable[Huey] = (),
    ) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = utcnow()
        self.id = f"{self.host}:{self.pid}:{int(time.time() * 1000)}"
        self.queues = queues
        self.worker_type = worker_type
        self.workers = workers
        self.board = board
        self.hueys = list(hueys)
        self.interval = float(app.config["CONSUMER_HEARTBEAT_SECONDS"])
        # A live consumer's row is never forgotten: a retention shorter than the lost window
        # (three beats) forgets a row once it is lost.
        self.retention = max(
            timedelta(minutes=app.config["CONSUMER_RETENTION_MINUTES"]),
            timedelta(seconds=LOST_AFTER_BEATS * self.interval),
        )
        # Thread (or greenlet) workers share their process's bounded pool: the heartbeat
        # takes its turn in it rather than holding one connection more (tasks.budget).
        self.owns_engine = worker_type == "process"
        self.engine = _engine(app) if self.owns_engine else _app_engine(app)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._forgot_at: datetime | None = None
        self.worker_deaths = 0
        self.deaths: list[dict[str, Any]] = []

    def start(self) -> None:
        # A consumer started while the database is briefly unreachable still serves its
        # queue, and registers at a later beat: its first is one failed attempt of many.
        pause = self._beat_once(self.interval)
        self._thread = threading.Thread(
            target=self._run, args=(pause,), name="consumer-presence", daemon=True
        )
        self._thread.start()

    def _run(self, pause: float) -> None:
        while not self._stop.wait(pause):
            pause = self._beat_once(self.interval)

    def _beat_once(self, pause: float) -> float:
        """One beat; the pause before the next (longer during an outage)."""
        try:
            self.beat()
        except Exception as exc:
            outage = outages.outage_of(exc)
            if outage is None:
                logger.exception("Heartbeat of consumer %s failed", self.id)
                return pause
            # Each beat of an outage is one failed attempt: said once, then backed off.
            return max(pause, outages.episode.failed(outage, "the consumer's heartbeat"))
        outages.episode.succeeded()
        return pause

    def beat(self) -> None:
        died = self.board.forget_dead()
        if died:
            # Huey's consumer restarts a dead process worker; what it ran is what an
            # operator looks for when a unit's worker was lost.
            logger.warning("Consumer %s: %d worker(s) died and were restarted", self.id, len(died))
            self.worker_deaths += len(died)
            self.deaths = (died + self.deaths)[:KEPT_DEATHS]
        now = utcnow()
        values = {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": self.queues,
            "worker_type": self.worker_type,
            "workers": self.workers,
            "started_at": self.started_at,
            "heartbeat_at": now,
            "running": self.board.read(),
            "worker_deaths": self.worker_deaths,
            "deaths": self.deaths,
        }
        table = ConsumerPresence.__table__
        dialect = sqlite if self.engine.dialect.name == "sqlite" else postgresql
        upsert = dialect.insert(table).values(**values)
        upsert = upsert.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "heartbeat_at": now,
                "running": values["running"],
                "worker_deaths": self.worker_deaths,
                "deaths": self.deaths,
            },
        )
        forget = self._forgot_at is None or now - self._forgot_at >= FORGET_EVERY
        with self.engine.begin() as conn:
            conn.execute(upsert)
            if forget:
                # Consumers killed long ago (no clean stop deleted their row) are forgotten.
                conn.execute(delete(table).where(table.c.heartbeat_at < now - self.retention))
        if forget:
            self._forgot_at = now
        for huey in self.hueys:
            # A SQLite queue's file says who reads it: the CLI asks before it trusts it.
            mark_reader(huey, self.id, time.time())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A beat under way would write the row again after the delete: a consumer
            # stopped cleanly would be shown lost, three beats later.
            self._thread.join(STOP_WAIT_SECONDS)
        try:
            with self.engine.begin() as conn:
                table = ConsumerPresence.__table__
                conn.execute(delete(table).where(table.c.id == self.id))
        except Exception:
            logger.exception("Consumer %s could not remove its row", self.id)
        if self.owns_engine:
            self.engine.dispose()


def _engine(app: Flask) -> Engine:
    options = engine_options(app.config)
    for pooling in ("pool_pre_ping", "pool_size", "max_overflow", "pool_timeout"):
        options.pop(pooling, None)
    engine = create_engine(app.config["SQLALCHEMY_DATABASE_URI"], poolclass=NullPool, **options)
    configure_engine(engine)
    name_connections(engine, app.config["DATABASE_APPLICATION_NAME"])
    return engine


def _app_engine(app: Flask) -> Engine:
    with app.app_context():
        return db.engine


def watch(hueys: Iterable[Huey], board: Board) -> None:
    """Let the workers of these queues write what they execute on the board."""
    for huey in hueys:
        huey.signal(S.SIGNAL_EXECUTING)(board.executing)
        huey.signal(*DONE_SIGNALS)(board.done)


def present(app: Flask, hueys: list[Huey], worker_type: str, workers: int) -> Presence:
    """The presence of a consumer of these queues, its workers writing on its board."""
    # Two slots per worker: a restarted worker claims a new one before the old is freed.
    board = Board(max(2, 2 * workers))
    watch(hueys, board)
    return Presence(
        app,
        [h.name.removeprefix("taskledger.") for h in hueys],
        worker_type,
        workers,
        board,
        hueys,
    )


def consumer_factory(app: Flask, huey: Huey):
    """``huey_consumer``'s consumer of one of our Huey instances: registered, beating."""

    def create_consumer(**options: Any) -> ObservedConsumer:
        consumer = ObservedConsumer(huey, **options)
        consumer.watcher = present(app, [huey], consumer.worker_type, consumer.workers)
        return consumer

    return create_consumer
