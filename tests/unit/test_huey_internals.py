"""Each Huey internal the project relies on (``tasks/huey_internals.py``), checked against
the installed Huey: an upgrade that changes one fails here, not in a consumer."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid
from datetime import datetime, timedelta
from functools import partial
from types import SimpleNamespace

import pytest
from huey import MemoryHuey, PriorityRedisHuey, RedisHuey, SqliteHuey, crontab
from huey.bin import huey_consumer
from huey.consumer import Consumer, ProcessEnvironment, Scheduler
from huey.signals import SIGNAL_ENQUEUED, SIGNAL_INTERRUPTED, SIGNAL_TIMEOUT

from database import utcnow
from tasks import huey_internals as internals
from tasks import outages
from tests.conftest import REDIS_URL, require_redis


@pytest.fixture
def restored_signals():
    """Consumers and workers set signal handlers: the test process gets its own back."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)
    saved = {signum: signal.getsignal(signum) for signum in stops}
    yield
    for signum, previous in saved.items():
        signal.signal(signum, previous)


@pytest.fixture
def redis_huey():
    """A Redis queue of its own name (so nothing else's keys are touched), flushed after."""
    require_redis()
    made = []

    def make(cls=RedisHuey):
        huey = cls(f"taskledger.test-internals-{uuid.uuid4().hex[:8]}", url=REDIS_URL)
        made.append(huey)
        return huey

    yield make
    for huey in made:
        huey.flush()


def echo_task(huey):
    @huey.task(name="echo")
    def echo(n):
        return n

    return echo


# -- enqueue_many: one round trip on Redis, each message as Huey.enqueue writes it ------


def test_a_bulk_enqueue_writes_what_huey_writes_task_by_task_and_signals_each(redis_huey):
    bulk, single = redis_huey(), redis_huey()
    signalled = []
    bulk.signal(SIGNAL_ENQUEUED)(lambda sig, task: signalled.append(task.id))
    bulk_echo, single_echo = echo_task(bulk), echo_task(single)
    tasks = [bulk_echo.s(n, expires=timedelta(hours=1)) for n in range(5)]
    singles = [single_echo.s(n, expires=timedelta(hours=1)) for n in range(5)]

    internals.enqueue_many(bulk, tasks)
    for task in singles:
        single.enqueue(task)

    assert signalled == [task.id for task in tasks]
    pending = bulk.pending()
    assert [t.args for t in pending] == [t.args for t in single.pending()]
    assert [t.id for t in pending] == [t.id for t in tasks]  # popped in the order given
    assert all(isinstance(t.expires_resolved, datetime) for t in pending)


def test_a_bulk_enqueue_keeps_each_tasks_priority_on_a_priority_queue(redis_huey):
    huey = redis_huey(PriorityRedisHuey)
    echo = echo_task(huey)

    internals.enqueue_many(huey, [echo.s(n, priority=n) for n in (1, 5, 3)])

    assert [huey.dequeue().args for _ in range(3)] == [(5,), (3,), (1,)]


def test_a_bulk_enqueue_refuses_a_priority_where_huey_refuses_it(redis_huey):
    huey = redis_huey()
    echo = echo_task(huey)
    with pytest.raises(NotImplementedError):
        huey.enqueue(echo.s(1, priority=2))
    with pytest.raises(NotImplementedError):
        internals.enqueue_many(huey, [echo.s(1, priority=2)])


def test_a_bulk_enqueue_elsewhere_is_hueys_own_enqueue_priorities_included(tmp_path):
    huey = SqliteHuey("taskledger.test-internals", filename=str(tmp_path / "q.sqlite3"))
    echo = echo_task(huey)

    internals.enqueue_many(huey, [echo.s(n, priority=n) for n in (1, 5, 3)])

    assert [huey.dequeue().args for _ in range(3)] == [(5,), (3,), (1,)]


# -- revoke_many and delete_many: a batch per round trip on Redis, as Huey writes each ------


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_a_bulk_revoke_revokes_for_good_what_huey_revokes_by_id(redis_huey, tmp_path, backend):
    if backend == "redis":
        bulk, single = redis_huey(), redis_huey()
    else:
        bulk = SqliteHuey("taskledger.test-bulk", filename=str(tmp_path / "bulk.sqlite3"))
        single = SqliteHuey("taskledger.test-single", filename=str(tmp_path / "one.sqlite3"))
    ids = [f"u{n}.{uuid.uuid4().hex}" for n in range(5)]

    internals.revoke_many(bulk, iter(ids), batch=2)
    for task_id in ids:
        single.revoke_by_id(task_id)

    assert sorted(bulk.storage.result_items().items()) == sorted(
        (key.replace(single.name, bulk.name), value)
        for key, value in single.storage.result_items().items()
    )
    for task_id in ids:
        assert bulk.is_revoked(task_id)
        assert bulk.is_revoked(task_id)  # still: not revoked once
    assert not bulk.is_revoked("u99.other")


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_a_bulk_delete_removes_those_result_keys_and_no_other(redis_huey, tmp_path, backend):
    if backend == "redis":
        huey = redis_huey()
    else:
        huey = SqliteHuey("taskledger.test-bulk", filename=str(tmp_path / "bulk.sqlite3"))
    for n in range(5):
        huey.revoke_by_id(f"u{n}.abc")

    keys = [f"{internals.REVOKE_PREFIX}u{n}.abc" for n in (0, 1, 2, 3, 9)]  # no u9 key

    assert internals.delete_many(huey, keys, 3) == 4

    assert list(huey.storage.result_items()) == [f"{internals.REVOKE_PREFIX}u4.abc"]
    assert internals.delete_many(huey, keys, 3) == 0


# -- the periodic tasks' slots -----------------------------------------------------------


def owes(due: bool, moment: datetime) -> list[datetime]:
    return [moment] if due else []


def test_the_scheduler_enqueues_the_periodic_instance_it_asked_with_its_slots():
    huey = MemoryHuey("taskledger.test-internals")
    due = datetime(2026, 1, 1, 10, 5)

    @huey.task(name="sweep", task_base=internals.SlottedPeriodicTask, due_slots=partial(owes, True))
    def sweep(slots=None, enqueued=None):
        return slots

    @huey.task(name="idle", task_base=internals.SlottedPeriodicTask, due_slots=partial(owes, False))
    def idle(slots=None):
        return slots

    [task] = huey.read_periodic(due)

    # With the moment it was enqueued: a slot claimed long after it is shown late.
    assert task.name == "sweep"
    assert task.kwargs == {"slots": [due.isoformat()], "enqueued": due.isoformat()}
    assert huey.serialize_task(task) == huey.serialize_task(
        huey.deserialize_task(huey.serialize_task(task))
    )


# -- the consumer: how huey_consumer makes it, when it starts and stops -------------------

SERVED = MemoryHuey("taskledger.test-internals-served")


def test_huey_consumer_runs_the_consumer_create_consumer_returns(monkeypatch):
    ran = []
    internals.serve_with(SERVED, lambda **options: SimpleNamespace(run=lambda: ran.append(options)))
    monkeypatch.setattr(sys, "argv", ["huey_consumer", f"{__name__}.SERVED", "-w", "3"])
    logger = logging.getLogger("huey")
    handlers, level = list(logger.handlers), logger.level
    try:
        huey_consumer.consumer_main()
    finally:
        logger.handlers, logger.level = handlers, level

    assert [options["workers"] for options in ran] == [3]


def test_a_consumer_starts_its_workers_then_tells_its_watcher_and_again_when_it_stops(
    restored_signals,
):
    seen = []
    consumer = internals.ObservedConsumer(
        MemoryHuey("taskledger.test-internals"), workers=1, worker_type="thread", periodic=False
    )
    consumer.watcher = SimpleNamespace(
        start=lambda: seen.append(("start", consumer.worker_threads[0][1].ident is not None)),
        stop=lambda: seen.append(("stop", None)),
    )
    consumer.stop_flag.set()  # asked to stop already: run() starts, then returns

    consumer.run()

    assert seen == [("start", True), ("stop", None)]


# -- the stop signal in a process worker -------------------------------------------------


def test_hueys_stop_handler_lives_in_huey_consumer_and_interrupts_only_a_busy_worker(
    restored_signals,
):
    huey = MemoryHuey("taskledger.test-internals")
    ProcessEnvironment().init_child(SimpleNamespace(huey=huey))
    handler = signal.getsignal(signal.SIGTERM)
    assert handler.__module__ in internals.STOP_HANDLER_MODULES

    assert handler(signal.SIGTERM, None) is None  # idle: it leaves through the stop flag
    busy, raised_in, interrupted = [], [], []
    huey.signal(SIGNAL_INTERRUPTED)(lambda sig, task: interrupted.append(task.name))

    @huey.task(name="job")
    def job():
        busy.append(internals.tasks_in_flight(huey))
        try:
            handler(signal.SIGTERM, None)
        except KeyboardInterrupt as stop:
            trace = stop.__traceback__
            while trace.tb_next is not None:
                trace = trace.tb_next
            raised_in.append(trace.tb_frame.f_globals["__name__"])
            raise

    huey.execute(job.s())  # the interrupt ends the task, and Huey says so (the hand-back)

    assert busy == [True] and not internals.tasks_in_flight(huey)
    assert raised_in == ["huey.consumer"] and interrupted == ["job"]


def test_a_process_workers_startup_hooks_run_after_hueys_stop_handler_is_installed():
    huey = MemoryHuey("taskledger.test-internals")
    read, write = os.pipe()

    @huey.on_startup()
    def note_handler():
        os.write(write, signal.getsignal(signal.SIGTERM).__module__.encode())

    consumer = Consumer(huey, workers=1, worker_type="process", periodic=False)
    consumer.stop_flag.set()  # the worker initializes, then leaves at once
    _worker, process = consumer.worker_threads[0]
    process.start()
    process.join(30)
    os.close(write)

    assert os.read(read, 100) == b"huey.consumer"
    os.close(read)


# -- the lean consumer's processes --------------------------------------------------------


def lane_hueys(tmp_path, count=2):
    return [
        SqliteHuey(f"taskledger.test-lane-{i}", filename=str(tmp_path / "lanes.sqlite3"))
        for i in range(count)
    ]


def test_a_lane_worker_takes_its_queues_in_turn(tmp_path):
    hueys = lane_hueys(tmp_path)
    done = []
    for i, huey in enumerate(hueys):

        @huey.task(name="work")
        def work(n, queue=i):
            done.append((queue, n))

        for n in range(2):
            huey.enqueue(work.s(n))
    worker = internals.LaneWorker(hueys, SimpleNamespace(wait=lambda t: None), 0.01, 0.1, 1.1)
    worker.initialize()
    for _ in range(5):
        worker.loop()
    assert done == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert not any(huey.storage.blocking for huey in hueys)


def test_a_lane_scheduler_moves_every_queues_due_tasks_and_one_queues_periodic_ones(tmp_path):
    hueys = lane_hueys(tmp_path)
    for huey in hueys:

        @huey.task(name="later")
        def later():
            pass

        huey.add_schedule(later.s(eta=utcnow() - timedelta(seconds=1)))

    @hueys[1].periodic_task(crontab(), name="tick")
    def tick():
        pass

    scheduler = internals.LaneScheduler(
        hueys, SimpleNamespace(wait=lambda t: None), 1, periodic_huey=hueys[1]
    )
    scheduler._next_periodic -= scheduler.periodic_task_seconds
    scheduler.loop()

    assert [t.name for t in hueys[0].pending()] == ["later"]
    assert sorted(t.name for t in hueys[1].pending()) == ["later", "tick"]


def test_a_scheduler_checks_the_periodic_schedules_as_often_as_it_is_told(monkeypatch):
    monkeypatch.setattr(Scheduler, "periodic_task_seconds", Scheduler.periodic_task_seconds)
    internals.check_periodic_every(5)
    huey = MemoryHuey("taskledger.test-internals")
    checked = []
    monkeypatch.setattr(huey, "read_periodic", lambda now: checked.append(now) or [])
    scheduler = Scheduler(huey, SimpleNamespace(wait=lambda t: None), 1, periodic=True)
    first = scheduler._next_periodic

    scheduler.loop()

    assert len(checked) == 1 and scheduler._next_periodic == first + 5


def test_a_lean_consumer_makes_one_process_per_lane_and_gives_every_queue_its_timeouts(
    tmp_path, restored_signals
):
    hueys = lane_hueys(tmp_path, 3)
    consumer = internals.LeanConsumer([hueys[:2], hueys[2:]], periodic_huey=hueys[0])

    assert consumer.workers == 2 and len(consumer.worker_threads) == 2
    assert all(huey._timeout_handler == consumer.environment.timeout for huey in hueys)
    assert isinstance(consumer.environment, internals.LaneEnvironment)

    @hueys[2].task(name="slow", timeout=1)
    def slow():
        time.sleep(3)

    timed_out = []
    hueys[2].signal(SIGNAL_TIMEOUT)(lambda sig, task, *args: timed_out.append(task.name))
    hueys[2].execute(slow.s())  # the lean consumer's process environment: SIGALRM

    assert timed_out == ["slow"]


# -- the result store's key names ---------------------------------------------------------


def test_the_result_store_names_revokes_rate_limits_and_locks_as_the_sweep_expects(tmp_path):
    huey = SqliteHuey("taskledger.test-keys", filename=str(tmp_path / "keys.sqlite3"))
    huey.revoke_by_id("u7.abc")
    huey.rate_limit("task-runner.payments", 5, 60).acquire()
    lock = huey.lock_task("builder.run:1234")
    lock.acquire()

    keys = list(huey.storage.result_items())

    assert f"{internals.REVOKE_PREFIX}u7.abc" in keys
    windows = internals.rate_limit_windows(huey, keys, "task-runner.")
    [(window, counter)] = windows.items()
    assert huey.storage.incr(counter, 0) == 1  # the counter the window goes with
    assert any(key.startswith(internals.lock_prefix(huey)) for key in keys)
    huey.storage.delete_counter(counter)
    assert huey.storage.incr(counter, 0) == 0


@pytest.fixture
def shared_postgres():
    """Two queues of one process on ``SharedPostgresStorage``, named to be counted."""
    from tests.conftest import BACKEND, PG_URL

    if BACKEND != "postgres":
        pytest.skip("PostgresHuey needs the PostgreSQL of the tests (TEST_BACKEND=postgres)")
    import psycopg
    from huey import PostgresHuey

    dsn = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    name = f"internals-{uuid.uuid4().hex[:8]}"
    hueys = [
        PostgresHuey(
            f"taskledger.{name}-{i}",
            storage_class=internals.SharedPostgresStorage,
            dsn=dsn,
            application_name=name,
            results=False,
        )
        for i in range(2)
    ]

    def connections() -> int:
        with psycopg.connect(dsn) as admin:
            return admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                [f"{name} %"],
            ).fetchone()[0]

    yield hueys, connections
    for huey in hueys:
        huey.flush()
    hueys[0].storage.close()


def test_threads_of_one_process_share_two_queue_connections_and_are_all_woken(shared_postgres):
    import threading

    (first, second), connections = shared_postgres
    echo = echo_task(first)
    got: list = []
    waiting = [threading.Thread(target=lambda: got.append(first.dequeue())) for _ in range(8)]
    second.enqueue(echo_task(second).s(0))  # a statement on the other queue, same connection
    for thread in waiting:
        thread.start()
    time.sleep(0.3)  # every thread waits on the queue, one of them on the LISTEN
    assert connections() == 2
    for n in range(8):
        first.enqueue(echo.s(n))
    for thread in waiting:
        thread.join(timeout=10)

    # Each waiting thread took a task, woken by the one that listens (read_timeout is 1 s:
    # a thread not woken would come back empty-handed).
    assert sorted(task.args[0] for task in got if task is not None) == list(range(8))
    assert connections() == 2
    assert second.pending_count() == 1


def test_a_process_worker_waits_for_work_on_its_one_statement_connection(shared_postgres):
    (first, _), connections = shared_postgres
    echo = echo_task(first)
    first.pending_count()
    first.storage.shared.single = True  # what a process worker's startup hook sets
    sender = os.fork()
    if sender == 0:  # pragma: no cover - another process enqueues while the worker waits
        time.sleep(0.3)
        first.enqueue(echo.s(7))
        os._exit(0)

    task = first.dequeue()  # waits up to read_timeout (1 s) on its LISTEN: woken sooner
    os.waitpid(sender, 0)

    assert task is not None and task.args == (7,)
    assert connections() == 1  # the worker's one connection (the sender's has gone)


def test_an_idle_queue_connection_the_server_ended_is_replaced_before_its_next_use(
    shared_postgres,
):
    import psycopg

    (first, _), connections = shared_postgres
    first.pending_count()
    name = first.storage.application_name
    dsn = first.storage.dsn
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name LIKE %s",
            [f"{name} %"],
        )

    assert first.pending_count() == 0  # no error for a session that ended while idle
    assert connections() == 1


def test_a_forked_process_opens_its_own_queue_connections(shared_postgres):
    (first, _), connections = shared_postgres
    first.pending_count()
    parent = first.storage.shared
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit code
        os._exit(0 if first.storage.shared is not parent and first.pending_count() == 0 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert first.storage.shared is parent


def test_a_sqlite_storage_reopens_its_file_when_it_was_replaced_under_it(tmp_path):
    path = tmp_path / "queue.sqlite3"

    def huey():
        return SqliteHuey(
            "taskledger.tasks", filename=str(path), storage_class=internals.WatchedSqliteStorage
        )

    consumer = huey()
    echo = echo_task(consumer)
    consumer.enqueue(echo.s(1))
    assert consumer.dequeue().args == (1,)

    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"queue.sqlite3{suffix}").unlink(missing_ok=True)
    cli = huey()  # a process that opens the path now: a new file
    cli.enqueue(echo_task(cli).s(2))

    assert consumer.dequeue().args == (2,)  # not the deleted file it had open


def test_a_sqlite_queue_commits_as_the_ledger_does_also_on_a_file_reopened(tmp_path):
    path = tmp_path / "queue.sqlite3"
    huey = SqliteHuey(
        "taskledger.tasks", filename=str(path), storage_class=internals.WatchedSqliteStorage
    )
    normal = 1  # PRAGMA synchronous: 0 OFF, 1 NORMAL (database.py's ledger), 2 FULL
    assert huey.storage.sql("pragma synchronous", results=True) == [(normal,)]

    path.unlink()
    huey.enqueue(echo_task(huey).s(1))  # the replaced file, opened again

    assert huey.storage.sql("pragma synchronous", results=True) == [(normal,)]
    assert huey.dequeue().args == (1,)


def test_a_consumers_mark_in_the_sqlite_file_says_when_it_last_read_it(tmp_path):
    huey = SqliteHuey(
        "taskledger.tasks",
        filename=str(tmp_path / "q.sqlite3"),
        storage_class=internals.WatchedSqliteStorage,
    )
    assert internals.last_read(huey) is None

    internals.mark_reader(huey, "host:1:1", 1000.0)
    internals.mark_reader(huey, "host:2:2", 1000.0 + internals.READER_RETENTION_SECONDS + 5)

    assert internals.last_read(huey) == 1000.0 + internals.READER_RETENTION_SECONDS + 5
    marks = huey.storage.sql("select key from kv", results=True)
    assert marks == [("reader.host:2:2",)]  # the reader silent for an hour is forgotten


def test_a_patient_worker_waits_out_an_outage_of_its_queue_without_a_traceback(monkeypatch, caplog):
    import psycopg

    episode = outages.Episode()
    monkeypatch.setattr(outages, "episode", episode)
    waits: list[float] = []

    class Refusing:
        name = "taskledger.tasks"
        storage = SimpleNamespace(blocking=True)
        _startup: dict = {}

        def dequeue(self):
            raise psycopg.OperationalError("connection refused")

    stop_flag = SimpleNamespace(wait=waits.append, is_set=lambda: False)
    worker = internals.PatientWorker(Refusing(), stop_flag, 0.1, 1.0, 1.1)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            worker.loop()

    assert waits == [0.5, 1.0, 2.0]
    assert [r.name for r in caplog.records] == ["tasks.outages"]
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    ("retry_delay", "retry_backoff", "retry_eta"),
    [(0, None, None), (5, 2, None), (5, None, None), (0, None, datetime(2030, 1, 1))],
)
def test_a_patient_requeue_does_what_hueys_own_requeue_does(retry_delay, retry_backoff, retry_eta):
    def requeued(patient: bool) -> tuple:
        huey = MemoryHuey(utc=True)
        if patient:
            internals.patient_bookkeeping(huey)

        @huey.task(retries=2, retry_delay=retry_delay, retry_backoff=retry_backoff)
        def flaky():
            return None

        task = flaky.s()
        huey._requeue_task(task, datetime(2029, 1, 1, 12), retry_eta)
        return (
            task.retries,
            task.retry_delay,
            task.eta,
            huey.pending_count(),
            huey.scheduled_count(),
        )

    assert requeued(patient=True) == requeued(patient=False)


def patient_huey_refusing_twice(tmp_path, monkeypatch, method: str) -> SqliteHuey:
    """A queue with the patient bookkeeping whose storage ``method`` meets an outage on its
    first two calls (the process's episode is the test's own)."""
    import psycopg

    monkeypatch.setattr(outages, "episode", outages.Episode())
    huey = SqliteHuey(f"taskledger.{method}", filename=str(tmp_path / "q.db"), utc=True)
    internals.patient_bookkeeping(huey)
    refusals = [psycopg.OperationalError("connection refused")] * 2
    call = getattr(huey.storage, method)

    def refusing(*args):
        if refusals:
            raise refusals.pop()
        return call(*args)

    monkeypatch.setattr(huey.storage, method, refusing)
    return huey


def test_a_task_to_retry_is_put_back_through_an_outage_of_its_queue(tmp_path, monkeypatch):
    # A unit's gate that cannot reach the database raises RetryTask; on the PostgreSQL
    # queue the write that puts the job back met the same outage and Huey dropped the job.
    from huey.exceptions import RetryTask

    huey = patient_huey_refusing_twice(tmp_path, monkeypatch, "add_to_schedule")

    @huey.task()
    def gated():
        raise RetryTask("gate unreachable", delay=3)

    gated()
    waits: list[float] = []
    stop_flag = SimpleNamespace(wait=waits.append, is_set=lambda: False)
    internals.PatientWorker(huey, stop_flag, 0.1, 1.0, 1.1).loop()

    assert waits == [0.5, 1.0]  # the process's back-off, then the write went through
    assert (huey.pending_count(), huey.scheduled_count()) == (0, 1)
    [again] = huey.scheduled()
    assert again.retries == 0  # a gate's retry spends no try


def test_a_task_whose_revoke_check_meets_an_outage_still_runs(tmp_path, monkeypatch):
    # Huey reads a task's revoke keys before it runs it: that read met the outage and the
    # task, already taken from the queue, was dropped unrun.
    huey = patient_huey_refusing_twice(tmp_path, monkeypatch, "peek_many")
    ran: list[int] = []

    @huey.task()
    def work(n):
        ran.append(n)

    work(7)
    waits: list[float] = []
    stop_flag = SimpleNamespace(wait=waits.append, is_set=lambda: False)
    internals.PatientWorker(huey, stop_flag, 0.1, 1.0, 1.1).loop()

    assert (ran, waits) == ([7], [0.5, 1.0])


def test_hueys_consumer_sets_its_stop_flag_before_it_signals_its_workers(restored_signals):
    # ``consumer_stopping``: a worker takes a SIGTERM for its consumer's stop only while
    # the stop flag is set; Huey's consumer sets it first, on an immediate stop too.
    consumer = Consumer(MemoryHuey("taskledger.test-internals"), workers=1, worker_type="process")
    seen = []
    consumer.environment.interrupt_workers = lambda procs: seen.append(consumer.stop_flag.is_set())

    consumer.stop(graceful=False)

    assert seen == [True]
    assert internals.consumer_stopping()  # outside a worker: nothing tells otherwise
