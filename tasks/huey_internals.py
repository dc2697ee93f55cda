"""Every Huey internal the project relies on, in one place.

Huey's public API (``task``, ``enqueue``, ``signal``, ``rate_limit``, ``revoke_by_id``,
its exceptions and ``crontab``) is used wherever it is needed. What is not public is
used here only, each reliance with its own test in ``tests/unit/test_huey_internals.py``
run on the version ``pyproject.toml`` pins (``huey>=3.5.4,<3.6``: what CI installs and
proves), so an upgrade that breaks one fails that test, not a consumer in production:

- ``enqueue_many``: ``Huey.enqueue``'s steps (``Task.resolve_expires``, ``Huey._emit``,
  ``Huey.serialize_task``), and a Redis storage that writes through its ``conn``;
- ``revoke_many`` and ``delete_many``: ``Huey.revoke`` writes ``(None, False)`` under the
  task's ``revoke_id``, and a Redis storage keeps its result store in the hash
  ``result_key``, written through its ``conn``;
- ``SlottedPeriodicTask``: ``Huey.read_periodic`` asks each periodic task class
  ``validate_datetime`` and enqueues that very instance, ``kwargs`` included;
- ``serve_with``: ``huey_consumer`` builds its consumer with ``huey.create_consumer``;
- ``check_periodic_every``: a scheduler checks the periodic schedules every
  ``Scheduler.periodic_task_seconds``;
- ``ObservedConsumer``: ``Consumer.run`` calls ``start`` once its workers may start, and
  returns (or raises) when the consumer stops; it makes its workers and its scheduler
  from ``worker_class`` and ``scheduler_class`` (``PatientWorker``, ``PatientScheduler``:
  the loops of ``Worker`` and ``Scheduler``, their ``stop_flag``, ``sleep`` and timing);
- the stop signal (``STOP_HANDLER_MODULES``, ``watch_stop_signal``, ``tasks_in_flight``):
  the SIGTERM handler a process worker gets (``ProcessEnvironment.init_child``) is a
  function of ``huey.consumer``, installed before the worker's startup hooks run, and
  interrupts only a worker whose ``Huey._tasks_in_flight`` is not empty; ``Consumer.stop``
  sets the stop flag before it signals its workers (``consumer_stopping``);
- the lean consumer (``LeanConsumer``): the loops of ``Worker`` and ``Scheduler``, and
  how ``Consumer`` makes, checks and times out its processes;
- the result store's key names (``REVOKE_PREFIX``, ``rate_limit_windows``, ``lock_prefix``);
- ``SharedPostgresStorage``: ``PostgresStorage`` runs every statement through ``db()``
  under its ``lock`` on ``conn``, waits for work in ``dequeue`` with ``_dequeue``,
  ``blocking``, ``read_timeout`` and ``channel``, and connects with ``dsn`` and
  ``connection_params``;
- ``WatchedSqliteStorage``: ``SqliteStorage`` reaches its connection through ``conn``
  (``_conn``, ``_create_connection``, ``ddl``, ``filename``);
- ``patient_bookkeeping``: ``Huey.execute`` checks a task's revoke keys with
  ``Huey.is_revoked(task, timestamp, peek)`` before it runs, and puts a task to retry back
  through ``Huey._requeue_task(task, timestamp, retry_eta)``, which spends a try, takes the
  next delay and writes the task with ``add_schedule`` (a delay or an eta) or ``enqueue``.
"""

from __future__ import annotations

import copy
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import MethodType
from typing import Any, Protocol

import psycopg
from huey import Huey
from huey.api import PeriodicTask, Task
from huey.consumer import Consumer, ProcessEnvironment, Scheduler, Worker
from huey.signals import SIGNAL_ENQUEUED
from huey.storage import PostgresStorage, RedisStorage, SqliteStorage
from psycopg import sql

from database import clock_offset
from tasks import outages

logger = logging.getLogger(__name__)


# Where the handlers live that raise a worker's stop: Huey's, and the lean lanes' (here).
STOP_HANDLER_MODULES = ("huey.consumer", __name__)
REVOKE_PREFIX = "r:"
_stop_signal_received = False
# How long a worker that received SIGTERM waits for its consumer's stop flag: Huey's
# consumer sets it before it signals its workers; a signal sent to every process of the
# group at once reaches the consumer too, which sets it within its loop's tenth of a second.
STOP_FLAG_GRACE_SECONDS = 2.0


def enqueue_many(huey: Huey, tasks: list[Task]) -> None:
    """Enqueue a chunk of tasks as ``Huey.enqueue`` does each: on Redis in one round trip.

    One LPUSH per task made dispatch a round trip per unit, slower than bare Huey's own
    enqueue (bench/RESULTS.md). Each message is written by the storage's own ``enqueue``
    on a pipeline that stands in for its connection, so a priority storage keeps each
    task's priority and one without priorities refuses it, exactly as Huey would; a
    consumer pops them in the order they were given.
    """
    storage = huey.storage
    if huey.immediate or not isinstance(storage, RedisStorage) or not tasks:
        for task in tasks:
            huey.enqueue(task)
        return
    with storage.conn.pipeline(transaction=False) as pipe:
        writer = copy.copy(storage)
        writer.conn = pipe
        for task in tasks:
            if task.expires:
                task.resolve_expires(huey.utc)
            huey._emit(SIGNAL_ENQUEUED, task)
            writer.enqueue(huey.serialize_task(task), task.priority)
        pipe.execute()


def revoke_many(huey: Huey, task_ids: Iterable[str], batch: int = 1000) -> None:
    """``Huey.revoke_by_id`` of every id: on Redis, a batch of ids per round trip.

    A cancelled million-unit run revoked its jobs one round trip each, minutes on end.
    Each revoke is what ``Huey.revoke`` writes (``put`` of the task's ``revoke_id``:
    revoked for good, not once) through a storage writing on a pipeline.
    """
    storage = huey.storage
    if huey.immediate or not isinstance(storage, RedisStorage):
        for task_id in task_ids:
            huey.revoke_by_id(task_id)
        return
    value = huey.serializer.serialize((None, False))
    for ids in batched(task_ids, batch):
        with storage.conn.pipeline(transaction=False) as pipe:
            writer = copy.copy(storage)
            writer.conn = pipe
            for task_id in ids:
                writer.put_data(Task(id=task_id).revoke_id, value)
            pipe.execute()


def delete_many(huey: Huey, keys: Iterable[str], batch: int = 1000) -> int:
    """``Huey.delete`` of every result-store key: on Redis, one ``HDEL`` per batch. Return
    how many were there to delete (another process may have deleted some first)."""
    storage = huey.storage
    if huey.immediate or not isinstance(storage, RedisStorage):
        return sum(bool(huey.delete(key)) for key in keys)
    return sum(storage.conn.hdel(storage.result_key, *names) for names in batched(keys, batch))


def batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class SlottedPeriodicTask(PeriodicTask):
    """A periodic task enqueued with the slots it is owed (its ``slots`` argument)."""

    due_slots: Callable[[datetime], list[datetime]]  # set per task, as a task() setting

    def validate_datetime(self, timestamp: datetime) -> bool:
        # Huey asks each fresh periodic task instance whether it is due, then enqueues it:
        # one job a check, carrying every slot that began since the scheduler's last one.
        # Huey's moment is this host's; the slots are the database's, like every schedulers'.
        owed = self.due_slots(timestamp + clock_offset())
        if not owed:
            return False
        self.kwargs = {
            "slots": [slot.isoformat() for slot in owed],
            "enqueued": timestamp.replace(tzinfo=None).isoformat(),
        }
        return True


def serve_with(huey: Huey, create_consumer: Callable[..., Consumer]) -> None:
    """Make ``huey_consumer`` run the consumer ``create_consumer(**options)`` returns."""
    huey.create_consumer = create_consumer


def note_stop_signal() -> None:
    """Record that this process was told to stop (from its stop signal's handler)."""
    global _stop_signal_received
    _stop_signal_received = True


def stop_signal_received() -> bool:
    return _stop_signal_received


def watch_stop_signal() -> None:
    """A process worker's startup hook: note SIGTERM before Huey's handler interrupts."""
    if threading.current_thread() is not threading.main_thread():
        return  # thread workers are never interrupted by a signal
    interrupt = signal.getsignal(signal.SIGTERM)
    if not callable(interrupt) or getattr(interrupt, "notes_stop", False):
        return

    def on_stop(signum: int, frame: Any) -> None:
        note_stop_signal()
        interrupt(signum, frame)

    on_stop.notes_stop = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, on_stop)


def consumer_stopping() -> bool:
    """Whether the consumer of the worker executing a task in this thread is stopping:
    a SIGTERM it did not send (a job's ``os.kill(os.getpid(), SIGTERM)``) is no stop.
    Outside a worker nothing tells otherwise, and the signal is taken as the stop."""
    stop_flag = getattr(_executing, "stop_flag", None)
    return stop_flag is None or bool(stop_flag.wait(STOP_FLAG_GRACE_SECONDS))


def check_periodic_every(seconds: int) -> None:
    """How often this process's schedulers check the periodic schedules (Huey: a minute)."""
    Scheduler.periodic_task_seconds = seconds


def tasks_in_flight(huey: Huey) -> bool:
    """Whether a worker of this process is executing one of ``huey``'s tasks now."""
    return bool(huey._tasks_in_flight)


def rate_limit_windows(huey: Huey, keys: list[str], prefix: str) -> dict[str, str]:
    """The windows of ``huey.rate_limit(name, …)`` for names starting with ``prefix``, among
    result-store keys: window key -> the key of its counter."""
    counter = f"{huey.name}.rl.{prefix}"
    return {k: k.removesuffix(".w") for k in keys if k.startswith(counter) and k.endswith(".w")}


def lock_prefix(huey: Huey) -> str:
    """What the key of every ``huey.lock_task(name)`` starts with."""
    return f"{huey.name}.lock."


class Watcher(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


# The stop flag of the worker executing a task in this thread (``PatientWorker``).
_executing = threading.local()


def patient_bookkeeping(huey: Huey) -> None:
    """Huey's own reads and writes around a job in a worker wait out an outage of the
    queue's server: the revoke check before the job (it met the outage and Huey dropped
    the job unrun), and the write that puts a job to retry back (a unit's gate that cannot
    reach the database raises ``RetryTask``; on the PostgreSQL queue that write met the
    same outage and Huey dropped the job, its unit pending with nothing queued for it).
    Each is tried again after each pause of the process's episode, until it goes through
    or the worker stops; outside a worker it fails at once, as before.
    """
    is_revoked = huey.is_revoked

    def patient_is_revoked(task: Any, timestamp: datetime | None = None, peek: bool = True):
        where = f"checking task {getattr(task, 'id', task)}"  # a task, or a task's id
        return _patiently(lambda: is_revoked(task, timestamp, peek), where)

    huey.is_revoked = patient_is_revoked  # type: ignore[method-assign]
    huey._requeue_task = MethodType(_requeue_patiently, huey)  # type: ignore[method-assign]


def _requeue_patiently(
    huey: Huey, task: Task, timestamp: datetime, retry_eta: datetime | None = None
) -> None:
    task.retries -= 1  # Huey's own steps, once; only the write is tried again
    logging.getLogger("huey").info("Requeueing %s, %s retries", task.id, task.retries)
    if retry_eta is None and task.retry_delay:
        retry_eta = timestamp + timedelta(seconds=task.retry_delay)
        if task.retry_backoff:
            task.retry_delay *= task.retry_backoff
    if retry_eta is not None:
        task.eta = retry_eta
    put = huey.add_schedule if retry_eta is not None else huey.enqueue
    _patiently(lambda: put(task), f"putting task {task.id} back to retry it")


def _patiently(attempt: Callable[[], Any], where: str) -> Any:
    stop_flag = getattr(_executing, "stop_flag", None)
    while True:
        try:
            value = attempt()
        except Exception as exc:
            outage = outages.outage_of(exc)
            if outage is None or stop_flag is None or stop_flag.is_set():
                raise
            stop_flag.wait(outages.episode.failed(outage, where))
        else:
            if stop_flag is not None:
                outages.episode.succeeded()
            return value


class PatientWorker(Worker):
    """Huey's worker that backs off while the queue's server is unreachable (``outages``):
    one warning per episode instead of a traceback per attempt."""

    def _read(self, huey: Huey) -> Task | None:
        """The next task of ``huey``, or None (an empty queue, an outage waited out, or an
        error logged)."""
        try:
            task = huey.dequeue()
        except Exception as exc:
            outage = outages.outage_of(exc)
            if outage is None:
                self._logger.exception("Error reading from queue %s", huey.name)
                return None
            self.stop_flag.wait(outages.episode.failed(outage, f"reading queue {huey.name}"))
            return None
        outages.episode.succeeded()
        return task

    def loop(self, now: Any = None) -> None:
        task = self._read(self.huey)
        if task is None:
            if not self.huey.storage.blocking:
                self.sleep()
            return
        self.delay = self.default_delay
        self._execute(self.huey, task, now)

    def _execute(self, huey: Huey, task: Task, now: Any) -> None:
        _executing.stop_flag = self.stop_flag
        try:
            huey.execute(task, now)
        except Exception as exc:
            # What failed is Huey's bookkeeping around the job in the queue's storage (its
            # revoke check and a retry's write wait out an outage, ``patient_bookkeeping``,
            # unless the worker is stopping).
            outage = outages.outage_of(exc)
            if outage is None:
                self._logger.exception("Unhandled error during execution of task %s.", task.id)
                return
            self.stop_flag.wait(outages.episode.failed(outage, f"after task {task.id}"))
        finally:
            _executing.stop_flag = None


class ObservedConsumer(Consumer):
    """Huey's consumer that tells its ``watcher`` when it has started and when it stops,
    and whose worker and scheduler back off during an outage."""

    watcher: Watcher | None = None
    worker_class = PatientWorker

    def start(self) -> None:
        super().start()
        if self.watcher is not None:
            self.watcher.start()

    def run(self) -> None:
        try:
            super().run()
        finally:
            if self.watcher is not None:
                self.watcher.stop()


# -- the lean consumer: one process worker per lane of queues -------------------------


class LaneWorker(PatientWorker):
    """One worker process that takes tasks from several queues, round robin."""

    process_name = "LaneWorker"

    def __init__(self, hueys: Sequence[Huey], stop_flag: Any, *delays: float) -> None:
        self.hueys = list(hueys)
        self._next = 0
        super().__init__(self.hueys[0], stop_flag, *delays)

    def initialize(self) -> None:
        for huey in self.hueys:
            if len(self.hueys) > 1:
                # A blocking read would hold the lane on an empty queue while another waits.
                huey.storage.blocking = False
            self.huey = huey
            super().initialize()
        self.huey = self.hueys[0]

    def shutdown(self) -> None:
        for huey in self.hueys:
            self.huey = huey
            super().shutdown()

    def loop(self, now: Any = None) -> None:
        for offset in range(len(self.hueys)):
            index = (self._next + offset) % len(self.hueys)
            huey = self.hueys[index]
            task = self._read(huey)
            if task is None:
                continue
            # The next pass starts after this queue, so no queue of the lane starves.
            self._next = (index + 1) % len(self.hueys)
            self.delay = self.default_delay
            self._execute(huey, task, now)
            return
        if not any(huey.storage.blocking for huey in self.hueys):
            self.sleep()


class LaneScheduler(Scheduler):
    """Moves due scheduled tasks of every queue; enqueues periodic tasks of one queue."""

    def __init__(
        self, hueys: Sequence[Huey], stop_flag: Any, interval: int, periodic_huey: Huey | None
    ) -> None:
        self.hueys = list(hueys)
        super().__init__(
            periodic_huey or self.hueys[0], stop_flag, interval, periodic_huey is not None
        )

    def loop(self, now: Any = None) -> None:
        current = self._next_loop
        self._next_loop += self.interval
        if self._next_loop < time.monotonic():
            self._next_loop = time.monotonic()
            return
        for huey in self.hueys:
            try:
                due = huey.read_schedule(now)
            except Exception as exc:
                outage = outages.outage_of(exc)
                if outage is None:
                    self._logger.exception("Error reading schedule of %s.", huey.name)
                    continue
                # The next loop is due after the pause: the schedule waits, nothing is lost.
                pause = outages.episode.failed(outage, f"reading the schedule of {huey.name}")
                self._next_loop = time.monotonic() + pause
                self.stop_flag.wait(pause)
                return
            outages.episode.succeeded()
            for task in due:
                try:
                    huey.enqueue(task)
                except Exception:
                    self._logger.exception("Error enqueueing %s.", task)
        if self.periodic and self._next_periodic <= time.monotonic():
            while self._next_periodic <= time.monotonic():
                self._next_periodic += self.periodic_task_seconds
            self.enqueue_periodic_tasks(now)
        self.sleep_for_interval(current, self.interval)


class PatientScheduler(LaneScheduler):
    """Huey's scheduler of one queue, backing off during an outage like the lean one."""

    def __init__(self, huey: Huey, stop_flag: Any, interval: int, periodic: bool) -> None:
        super().__init__([huey], stop_flag, interval, huey if periodic else None)


ObservedConsumer.scheduler_class = PatientScheduler


class LaneEnvironment(ProcessEnvironment):
    def init_child(self, process: Any) -> None:
        hueys = getattr(process, "hueys", [process.huey])

        def interrupt(signum: int, frame: Any) -> None:
            note_stop_signal()
            # Same rule as Huey's: only a task in flight is interrupted (it is handed back).
            if any(tasks_in_flight(huey) for huey in hueys):
                raise KeyboardInterrupt

        signal.signal(self.graceful, signal.SIG_IGN)
        signal.signal(self.interrupt, interrupt)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


class LeanConsumer(ObservedConsumer):
    """A Huey consumer whose process workers each serve a lane of queues."""

    def __init__(
        self, lanes: Sequence[Sequence[Huey]], periodic_huey: Huey | None, **options: Any
    ) -> None:
        self.lanes = [list(lane) for lane in lanes]
        self.hueys = [huey for lane in self.lanes for huey in lane]
        self.periodic_huey = periodic_huey
        super().__init__(
            self.hueys[0],
            workers=0,
            periodic=periodic_huey is not None,
            worker_type="process",
            **options,
        )
        for huey in self.hueys:
            huey._timeout_handler = self.environment.timeout
        self.workers = len(self.lanes)
        self.worker_threads = [self._lane_process(i) for i in range(len(self.lanes))]

    def get_environment(self, worker_type: str) -> ProcessEnvironment:
        return LaneEnvironment(self._graceful_sig, self._interrupt_sig)

    def _create_scheduler(self) -> LaneScheduler:
        return LaneScheduler(
            self.hueys, self.stop_flag, self.scheduler_interval, self.periodic_huey
        )

    def _lane_process(self, index: int) -> tuple[LaneWorker, Any]:
        worker = LaneWorker(
            self.lanes[index], self.stop_flag, self.default_delay, self.max_delay, self.backoff
        )
        return worker, self._create_process(worker, f"Lane-{index + 1}")

    def start(self) -> None:
        for huey in self.hueys[1:]:
            huey.storage.close()  # forked children must not share a connection
        super().start()

    def check_worker_health(self) -> bool:
        healthy = True
        for index, (_worker, process) in enumerate(self.worker_threads):
            if not self.environment.is_alive(process):
                self._logger.warning("Lane %d worker died, restarting.", index + 1)
                self.worker_threads[index] = self._lane_process(index)
                self.worker_threads[index][1].start()
                healthy = False
        if not self.environment.is_alive(self.scheduler):
            self._logger.warning("Scheduler died, restarting.")
            self.scheduler = self._create_process(self._create_scheduler(), "Scheduler")
            self.scheduler.start()
        return healthy


# -- the PostgreSQL queue: two connections a process, whatever its threads ------------


class ProcessConnections:
    """One process's two connections to the queue's PostgreSQL, shared by every queue
    and thread of it: one for statements (taken under ``lock``), one that LISTENs.

    Huey's storage keeps a statement connection per queue and a LISTEN connection per
    thread: 32 threads of the io lane held 33 connections idle. Here one thread at a
    time waits on the LISTEN connection; the others wait to be woken by it, and every
    woken thread tries the queue (a notification may have been for another queue: the
    try finds nothing and the thread waits again, as Huey's own threads do).

    A process whose one thread is all that uses the queue (a process worker: ``single``)
    LISTENs on its statement connection, under its lock, and holds one connection.
    """

    single = False

    def __init__(self, connect: Callable[[], Any]) -> None:
        self.connect = connect
        self.lock = threading.Lock()
        self.statements: Any = None
        self._listen_lock = threading.Lock()
        self._listener: Any = None
        self._channels: set[str] = set()
        self._woken = threading.Condition()

    def statement_conn(self) -> Any:
        """The statement connection (the caller holds ``lock``), made again when broken --
        or when the server ended its session while it was idle: a backend terminated
        between two statements says so at once, and the next statement need not fail."""
        if self.statements is not None and (
            self.statements.closed or self.statements.broken or _dropped(self.statements)
        ):
            _close_quietly(self.statements)
            self.statements = None
        if self.statements is None:
            self.statements = self.connect()
        return self.statements

    def wait(self, channel: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification; whether one came (to anyone)."""
        if self.single:
            with self.lock:
                return self._listen_on_statements(channel, timeout)
        if not self._listen_lock.acquire(blocking=False):
            with self._woken:
                return self._woken.wait(timeout)
        try:
            heard = self._listen(channel, timeout)
        finally:
            self._listen_lock.release()
        if heard:
            with self._woken:
                self._woken.notify_all()
        return heard

    def _listen(self, channel: str, timeout: float) -> bool:
        for fresh in (False, True):
            kept = self._listener is not None
            try:
                conn = self._listening(channel)
                return bool(list(conn.notifies(timeout=timeout, stop_after=1)))
            except Exception:
                _close_quietly(self._listener)
                self._listener = None
                # A kept connection the server dropped while it was idle (an outage since
                # ended) is replaced once at once; a fresh one that fails is an outage.
                if fresh or not kept:
                    raise
        return False

    def _listen_on_statements(self, channel: str, timeout: float) -> bool:
        for fresh in (False, True):
            kept = self.statements is not None
            try:
                conn = self.statement_conn()
                if conn is not self._listener:
                    self._listener, self._channels = conn, set()
                if channel not in self._channels:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self._channels.add(channel)
                return bool(list(conn.notifies(timeout=timeout, stop_after=1)))
            except Exception:
                _close_quietly(self.statements)
                self.statements = self._listener = None
                if fresh or not kept:  # as in ``_listen``: a kept one is replaced once
                    raise
        return False

    def _listening(self, channel: str) -> Any:
        if self._listener is not None and (self._listener.closed or self._listener.broken):
            _close_quietly(self._listener)
            self._listener = None
        if self._listener is None:
            self._listener = self.connect()
            self._channels = set()
        if channel not in self._channels:
            self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._channels.add(channel)
        return self._listener

    def close(self) -> None:
        with self.lock:
            _close_quietly(self.statements)
            self.statements = None
        with self._listen_lock:
            _close_quietly(self._listener)
            self._listener = None


def use_one_queue_connection(huey: Huey) -> None:
    """A worker's startup hook: a process worker (its hooks run on the main thread; a
    thread worker's on its own thread) waits on its statement connection."""
    storage = huey.storage
    if isinstance(storage, SharedPostgresStorage) and (
        threading.current_thread() is threading.main_thread()
    ):
        storage.shared.single = True


def _dropped(conn: Any) -> bool:
    """Whether the server ended an idle connection's session: the only other thing it
    sends unasked is a notification, to a connection that LISTENs. Read here, that one is
    dropped: the worker about to use the connection reads the queue anyway."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if not readable:
            return False
        conn.pgconn.consume_input()
    except Exception:  # closed, or the read failed: the session is over
        return True
    heard = False
    while conn.pgconn.notifies() is not None:
        heard = True
    return not heard or conn.pgconn.status != psycopg.pq.ConnStatus.OK


def _close_quietly(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # a broken connection is simply let go
            pass


_PROCESS_CONNECTIONS: dict[tuple[int, str], ProcessConnections] = {}
_PROCESS_CONNECTIONS_LOCK = threading.Lock()


class SharedPostgresStorage(PostgresStorage):
    """Huey's PostgreSQL storage on its process's ``ProcessConnections`` (per pid: a forked
    worker opens its own and never touches its parent's). ``application_name`` names
    the process, so ``pg_stat_activity`` shows what each one holds."""

    def __init__(self, *args: Any, application_name: str = "taskledger", **kwargs: Any) -> None:
        self.application_name = application_name
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def lock(self) -> Any:
        return self.shared.lock

    @lock.setter
    def lock(self, _value: Any) -> None:
        pass  # Huey's own lock per storage: the shared connection has the process's one

    _found: tuple[int, ProcessConnections] | None = None

    @property
    def shared(self) -> ProcessConnections:
        found = self._found
        if found is not None and found[0] == os.getpid():
            return found[1]  # every statement asks: the lookup is made once a process
        where = (self.dsn or "", self.application_name, sorted(self.connection_params.items()))
        key = (os.getpid(), repr(where))
        with _PROCESS_CONNECTIONS_LOCK:
            shared = _PROCESS_CONNECTIONS.get(key)
            if shared is None:
                shared = _PROCESS_CONNECTIONS[key] = ProcessConnections(self._connect)
        self._found = (os.getpid(), shared)
        return shared

    def _connect(self) -> Any:
        conn = psycopg.connect(
            self.dsn or "",
            **{**self.connection_params, "application_name": self.application_name_now()},
        )
        conn.autocommit = True
        return conn

    def application_name_now(self) -> str:
        return f"{self.application_name} {os.getpid()} queue"[:63]

    @property
    def conn(self) -> Any:
        return self.shared.statement_conn()

    @contextmanager
    def db(self, commit: bool = False, close: bool = False) -> Iterator[Any]:
        shared = self.shared
        with shared.lock:
            conn = shared.statement_conn()
            cursor = conn.cursor()
            try:
                if commit:
                    cursor.execute(self.begin_sql)
                yield cursor
            except Exception:
                if commit:
                    _rollback_quietly(conn)
                raise
            else:
                if commit:
                    conn.commit()
            finally:
                cursor.close()
                if close:
                    _close_quietly(conn)
                    shared.statements = None

    def close(self) -> bool:
        self.shared.close()
        return True

    def dequeue(self) -> Any:
        data = self._dequeue()
        if data is not None or not self.blocking:
            return data
        deadline = time.monotonic() + self.read_timeout
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0 or not self.shared.wait(self.channel, timeout):
                return None
            data = self._dequeue()
            if data is not None:
                return data  # otherwise another worker won, or it was another queue's


def _rollback_quietly(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # the connection broke: the next statement makes a new one
        pass


# -- the SQLite queue: a file replaced under running consumers --------------------------


class WatchedSqliteStorage(SqliteStorage):
    """Huey's SQLite storage that notices its file was replaced under it.

    An open SQLite connection keeps the file it opened: deleted (and made anew by the
    next process that opens the path) or truncated, the consumer would go on reading a
    file nobody writes to, while the CLI writes to one nobody reads. Before every use of
    its connection (each wake-up of a worker reads the queue through it) the storage
    compares the path's inode with the one it opened, and its size with zero; when they
    differ it closes the connection and opens the path again, with Huey's tables.
    """

    _opened: tuple[int, int] | None = None

    @property
    def conn(self) -> Any:
        if self._conn is not None and self._replaced():
            logger.warning(
                "Queue file %s was replaced (deleted or truncated): reopening it", self.filename
            )
            _close_quietly(self._conn)
            self._conn = None
        if self._conn is None:
            conn = self._create_connection()
            for ddl in self.ddl:  # a new file has none of Huey's tables yet
                conn.execute(ddl)
            self._conn = conn
            self._opened = _identity(self.filename)
        return self._conn

    def _create_connection(self) -> Any:
        conn = super()._create_connection()
        # The ledger is the record of what ran, and it commits at NORMAL (database.py):
        # a job this file loses to a power cut shows as a `never started` unit, a dequeue
        # it forgets runs into a gate that refuses it. At Huey's default (FULL) every
        # enqueue and dequeue would wait for a flush, for a durability the ledger lacks.
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _replaced(self) -> bool:
        try:
            found = os.stat(self.filename)  # one call: it runs before every use
        except FileNotFoundError:
            return True
        return (found.st_dev, found.st_ino) != self._opened or found.st_size == 0


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


READER_PREFIX = "reader."
READER_RETENTION_SECONDS = 3600


def mark_reader(huey: Huey, reader: str, now: float) -> None:
    """Note in a SQLite queue's own file that ``reader`` reads it now (its key-value
    table), and forget readers silent for an hour: the CLI asks the file it writes to
    whether anyone reads it (``last_read``)."""
    storage = huey.storage
    if not isinstance(storage, WatchedSqliteStorage):
        return
    storage.put_data(READER_PREFIX + reader, repr(now).encode())
    storage.sql(
        "delete from kv where queue = ? and key like ? and cast(value as real) < ?",
        (storage.name, READER_PREFIX + "%", now - READER_RETENTION_SECONDS),
        commit=True,
    )


def last_read(huey: Huey) -> float | None:
    """When a consumer last said it reads this SQLite queue's file (None: never)."""
    storage = huey.storage
    rows = storage.sql(
        "select max(cast(value as real)) from kv where queue = ? and key like ?",
        (storage.name, READER_PREFIX + "%"),
        results=True,
    )
    return rows[0][0] if rows else None
