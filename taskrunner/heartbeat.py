"""Heartbeats of running units: one thread per worker process, one UPDATE per beat.

Each running unit's row gets ``heartbeat_at`` refreshed every
``TASK_RUNNER_HEARTBEAT_SECONDS`` while its job runs; a unit whose heartbeat is
old belongs to a worker that died (``worker lost``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from flask import Flask, current_app

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self) -> None:
        self._units: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    @contextmanager
    def beating(self, unit_id: int) -> Iterator[None]:
        self._ensure_thread(current_app._get_current_object())
        with self._lock:
            self._units.add(unit_id)
        try:
            yield
        finally:
            with self._lock:
                self._units.discard(unit_id)

    def _ensure_thread(self, app: Flask) -> None:
        # A forked worker inherits the set but not the thread: start one per process.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._lock:
            self._units = set()
            self._pid = os.getpid()
            interval = app.config["TASK_RUNNER_HEARTBEAT_SECONDS"]
            self._thread = threading.Thread(
                target=self._beat, args=(app, interval), name="unit-heartbeat", daemon=True
            )
            self._thread.start()

    def _beat(self, app: Flask, interval: float) -> None:
        from taskrunner.ledger import ledger

        stop = threading.Event()
        while not stop.wait(interval):
            with self._lock:
                units = list(self._units)
            if not units:
                continue
            try:
                with app.app_context():
                    ledger.heartbeat(units)
            except Exception:
                logger.exception("Heartbeat of %d units failed", len(units))


heartbeat = Heartbeat()
