"""Heartbeats of running units: one thread per worker process, one UPDATE per beat.

Each running unit's row gets ``heartbeat_at`` refreshed every
``TASK_RUNNER_HEARTBEAT_SECONDS`` while its job runs, only while that job still
holds the unit's dispatch token; a unit whose heartbeat is old belongs to a
worker that died (``worker lost``), even if a superseded job still runs it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from flask import Flask, current_app

from taskrunner.ledger import ledger
from tasks import outages

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self) -> None:
        self._units: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid: int | None = None
        self._app: Flask | None = None

    @contextmanager
    def beating(self, unit_id: int, token: str) -> Iterator[None]:
        """Keep a unit alive while this job, holding ``token``, runs it."""
        self._ensure_thread(current_app._get_current_object())
        owned = (unit_id, token)
        with self._lock:
            self._units.add(owned)
        try:
            yield
        finally:
            with self._lock:
                self._units.discard(owned)

    def _running_for(self, app: Flask) -> bool:
        return (
            self._thread is not None
            and self._thread.is_alive()
            and self._pid == os.getpid()
            and self._app is app
        )

    def _ensure_thread(self, app: Flask) -> None:
        """One beating thread per process, for the app whose jobs run here (and its settings)."""
        if self._running_for(app):
            return
        with self._lock:
            if self._running_for(app):
                return
            if self._pid != os.getpid():
                # A forked worker inherits the set but not the thread.
                self._units = set()
            self._stop.set()
            self._stop = threading.Event()
            self._pid, self._app = os.getpid(), app
            interval = app.config["TASK_RUNNER_HEARTBEAT_SECONDS"]
            self._thread = threading.Thread(
                target=self._beat,
                args=(app, interval, self._stop),
                name="unit-heartbeat",
                daemon=True,
            )
            self._thread.start()

    def _beat(self, app: Flask, interval: float, stop: threading.Event) -> None:
        while not stop.wait(interval):
            with self._lock:
                units = list(self._units)
            if not units:
                continue
            try:
                with app.app_context():
                    ledger.transitions.heartbeat(units)
            except Exception as exc:
                outage = outages.outage_of(exc)
                if outage is None:
                    logger.exception("Heartbeat of %d units failed", len(units))
                else:
                    outages.episode.failed(outage, "the units' heartbeat")
            else:
                outages.episode.succeeded()


heartbeat = Heartbeat()
