"""Fixtures: an app per test on its own database state, on the chosen backend.

``TEST_BACKEND=sqlite`` (default): SQLite file + SqliteHuey in a temporary folder.
``TEST_BACKEND=postgres``: PostgreSQL (``TEST_DATABASE_URL``) + RedisHuey
(``TEST_REDIS_URL``). A server that cannot be reached fails the run under
``CI=true`` and skips the tests that need it elsewhere.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import psycopg
import pytest
from huey.storage import SqliteStorage
from jinja2.bccache import Bucket, BytecodeCache
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import text

from app import create_app
from extensions import db
from harness import build_app, reset_postgres_schema
from taskrunner.contract import TaskDefinition, register
from taskrunner.ledger import forget_cached_runs, release_hot_connection
from tests.support import Consumers

BACKEND = os.environ.get("TEST_BACKEND", "sqlite")
PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI") == "true"
ROOT = Path(__file__).resolve().parent.parent


SHARED_DATABASE = PG_URL.rsplit("/", 1)[1]


def keep_off_the_shared_database() -> None:
    """In the SQLite pass, refuse any connection to PostgreSQL's shared test database.

    CI runs the PostgreSQL pass beside this one, and its outage tests close that database
    to connections or end its sessions: a test of this pass using it fails at random (it
    once ended the whole pass). A database of a test's own (a drift check's) is allowed.
    """
    connect = psycopg.Connection.connect.__func__

    def refusing(cls, conninfo: str = "", **kwargs):
        if conninfo_to_dict(conninfo, **kwargs).get("dbname") == SHARED_DATABASE:
            raise RuntimeError(
                f"the SQLite pass may not use PostgreSQL's shared database {SHARED_DATABASE!r}"
                " (the PostgreSQL pass closes it beside this one): skip the test here"
            )
        return connect(cls, conninfo, **kwargs)

    psycopg.Connection.connect = classmethod(refusing)
    psycopg.connect = psycopg.Connection.connect


if BACKEND != "postgres":
    keep_off_the_shared_database()


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_server(name: str, host: str, port: int) -> None:
    if reachable(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(message + " (CI=true: servers are required)")
    pytest.skip(message)


def require_postgres() -> None:
    require_server("PostgreSQL", "127.0.0.1", 5432)


def require_redis() -> None:
    require_server("Redis", "127.0.0.1", 6379)


@pytest.fixture(autouse=True, scope="session")
def one_scrypt_per_password():
    """Each password is hashed, and each hash checked against a password, once a session:
    scrypt is slow on purpose (0.1 s a call), and the tests make and sign in hundreds of
    operators with a handful of passwords. A check's answer is the real one (scrypt of the
    same salt and password gives the same key); a process the tests start hashes anew."""
    from accounts import services

    with pytest.MonkeyPatch.context() as patch:
        for name in ("generate_password_hash", "check_password_hash"):
            patch.setattr(services, name, functools.cache(getattr(services, name)))
        yield


@pytest.fixture(scope="session")
def base_config(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("backend")
    config = {
        "TESTING": True,
        "SECRET_KEY": "test-secret",
        "SERVER_NAME": "localhost",
        "INSTANCE_PATH": str(folder),
        "TASK_RUNNER_HEARTBEAT_SECONDS": 30,
        # Live pages' streams end at once in tests (a browser would reconnect).
        "LIVE_STREAM_SECONDS": 1,
        "LIVE_POLL_SECONDS": 0.1,
        "OVERVIEW_CACHE_SECONDS": 0,  # each test reads the strip it just changed
        # The test clients speak plain http; production cookies are Secure.
        "SESSION_COOKIE_SECURE": False,
    }
    if BACKEND == "postgres":
        require_postgres()
        require_redis()
        reset_postgres_schema(PG_URL)
        config |= {
            "SQLALCHEMY_DATABASE_URI": PG_URL,
            "QUEUE_DRIVER": "redis",
            "REDIS_URL": REDIS_URL,
        }
    else:
        config |= {
            "SQLALCHEMY_DATABASE_URI": f"sqlite:///{folder / 'ledger.db'}",
            "QUEUE_DRIVER": "sqlite",
            "QUEUE_SQLITE_PATH": str(folder / "queue.sqlite3"),
        }
    build_app(config)
    return config


def empty_tables() -> None:
    # DELETE, children first, on both backends: a test leaves a few rows, and on PostgreSQL
    # a TRUNCATE of every table took ~80 ms (a new file per table), DELETE ~6 ms.
    for table in reversed(db.metadata.sorted_tables):
        db.session.execute(text(f"DELETE FROM {table.name}"))
    db.session.commit()


class CompiledTemplates(BytecodeCache):
    """The templates' compiled code, shared by the apps of a session: compiling them is
    most of what a page costs the first time an app renders it (25 templates, 0.4 s),
    and every test has apps of its own. Jinja checks each entry against the source."""

    def __init__(self) -> None:
        self.codes: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        if bucket.key in self.codes:
            bucket.bytecode_from_string(self.codes[bucket.key])

    def dump_bytecode(self, bucket: Bucket) -> None:
        self.codes[bucket.key] = bucket.bytecode_to_string()


COMPILED_TEMPLATES = CompiledTemplates()


class AppMaker:
    """Builds the apps of one test on its backend, each with its own runner state."""

    def __init__(self, base_config: dict) -> None:
        self.base_config = base_config
        self.made: list = []
        self.definitions: list[TaskDefinition] = []

    def __call__(self, **overrides):
        app = create_app({**self.base_config, **overrides})
        app.jinja_env.bytecode_cache = COMPILED_TEMPLATES
        self._register_on(app, self.definitions)
        self.made.append(app)
        return app

    def register(self, *definitions: TaskDefinition) -> None:
        """Register task types on every app of this test, made or still to be made."""
        self.definitions += definitions
        for app in self.made:
            self._register_on(app, definitions)

    @staticmethod
    def _register_on(app, definitions) -> None:
        with app.app_context():
            for definition in definitions:
                register(definition)


@pytest.fixture
def make_app(base_config):
    """Build an app on the test's backend with extra settings; state is emptied after."""
    maker = AppMaker(base_config)
    yield maker
    # The gate's kept connection belongs to this test's database: a later test may
    # replace that file, and SQLite fails on a connection to a file that was replaced.
    release_hot_connection()
    for app in maker.made:
        with app.app_context():
            db.session.remove()
            empty_tables()
            if not app.config.get("QUEUE_IMMEDIATE"):
                for huey in app.extensions["queues"].all().values():
                    try:
                        huey.flush()
                    except Exception:  # a test may point a queue at a server that is down
                        pass
            # A test's SQLite queues close their connections with it: a long session would
            # otherwise hold one per queue of every app it ever built on the same file.
            for huey in app.extensions["queues"].all().values():
                if isinstance(huey.storage, SqliteStorage):
                    huey.storage.close()
            db.engine.dispose()
    forget_cached_runs()


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def inline_app(make_app):
    """Jobs run inline, inside ``enqueue`` (Huey's immediate mode)."""
    return make_app(QUEUE_IMMEDIATE=True)


@pytest.fixture
def race_app(make_app):
    """An app on PostgreSQL, in its context, for the threads of a forced race."""
    require_postgres()
    app = make_app()
    with app.app_context():
        yield app


@pytest.fixture
def ctx(app):
    with app.app_context():
        yield app


@pytest.fixture
def inline_ctx(inline_app):
    with inline_app.app_context():
        yield inline_app


@pytest.fixture
def cli(app):
    return app.test_cli_runner()


@pytest.fixture
def consumers(app, tmp_path):
    pool = Consumers(app, tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def controlled(make_app):
    """A ``tests.controlled`` task type, registered on every app of the test."""
    from tests.factories import ControlledTask

    task = ControlledTask()
    make_app.register(task)
    return task
