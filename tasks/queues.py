"""One Huey instance per queue, in the variant of ``QUEUE_DRIVER``.

Instances are made lazily, on first use, from the app's config: importing this
module opens nothing. Every job runs inside a fresh app context of the app that
owns the instance (the pattern of Flask's Celery example).
"""

from __future__ import annotations

import functools
from typing import Any

from flask import Flask
from huey import Huey, PostgresHuey, RedisHuey, SqliteHuey

from tasks.routing import QUEUE_NAMES, routes


class QueueConfigError(Exception):
    pass


def _make_huey(app: Flask, queue: str) -> Huey:
    driver = app.config["QUEUE_DRIVER"]
    name = f"taskledger.{queue}"
    common: dict[str, Any] = {"results": False, "utc": True}
    if app.config.get("QUEUE_IMMEDIATE"):
        return Huey(name, immediate=True, **common)
    if driver == "sqlite":
        return SqliteHuey(name, filename=app.config["QUEUE_SQLITE_PATH"], timeout=30, **common)
    if driver == "redis":
        return RedisHuey(name, url=app.config["REDIS_URL"], **common)
    if driver == "postgres":
        dsn = app.config.get("QUEUE_POSTGRES_DSN") or _libpq_dsn(
            app.config["SQLALCHEMY_DATABASE_URI"]
        )
        return PostgresHuey(name, dsn=dsn, **common)
    raise QueueConfigError(f"QUEUE_DRIVER must be sqlite, redis or postgres, not {driver!r}")


def _libpq_dsn(url: str) -> str:
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

    def task(self, job_name: str, queue: str | None = None) -> Any:
        """The Huey task wrapper of a job (on ``queue`` for jobs served by every queue)."""
        spec = routes.jobs[job_name]
        queue = spec.queue or queue or "default"
        self.huey(queue)
        return self._tasks[(queue, job_name)]

    def _build(self, queue: str) -> Huey:
        huey = _make_huey(self.app, queue)
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
        if queue == "default":
            for pspec in routes.periodic.values():
                huey.periodic_task(pspec.schedule, name=pspec.name, timeout=pspec.timeout)(
                    self._in_app_context(pspec.fn, False)
                )
        for signals, handler in routes.signals:
            huey.signal(*signals)(self._signal_in_app_context(handler, queue))
        return huey

    def _in_app_context(self, fn: Any, wants_task: bool) -> Any:
        app = self.app

        @functools.wraps(fn)
        def run(*args: Any, task: Any = None, **kwargs: Any) -> Any:
            with app.app_context():
                if wants_task:
                    kwargs["task"] = task
                return fn(*args, **kwargs)

        return run

    def _signal_in_app_context(self, handler: Any, queue: str) -> Any:
        app = self.app

        def receive(signal: str, task: Any, *args: Any) -> None:
            with app.app_context():
                handler(signal, task, queue, *args)

        return receive


def queues() -> Queues:
    from flask import current_app

    return current_app.extensions["queues"]


def init_app(app: Flask) -> None:
    app.extensions["queues"] = Queues(app)
