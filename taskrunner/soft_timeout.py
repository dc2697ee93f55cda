"""Soft timeouts for jobs on thread workers (the I/O lane).

A thread cannot be killed, and Huey's thread workers enforce no timeout at all. A
watcher thread raises ``TaskTimeout`` in a job's thread once its deadline passes
(``PyThreadState_SetAsyncExc``): it lands at the thread's next Python instruction.
A job blocked in a socket read gets there when its client's own timeout fires, which
is why jobs on a soft lane must give their clients timeouts shorter than the type's.
A job that swallows the exception is still recorded as timed out when it returns.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from huey.exceptions import TaskTimeout


def _raise_in(ident: int, exc: type[BaseException] | None) -> None:
    """Make ``exc`` pending in thread ``ident`` (None withdraws one not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


@dataclass
class _Limit:
    deadline: float
    seconds: float
    fired: bool = False


class SoftTimeouts:
    def __init__(self) -> None:
        self._limits: dict[int, _Limit] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def limit(self, seconds: float) -> Iterator[None]:
        """Raise ``TaskTimeout`` in this thread if the block runs longer than ``seconds``."""
        ident = threading.get_ident()
        entry = _Limit(time.monotonic() + seconds, seconds)
        with self._lock:
            self._limits[ident] = entry
            self._ensure_thread()
        self._wake.set()
        landed = False
        try:
            yield
        except TaskTimeout:
            landed = True
            raise
        finally:
            try:
                with self._lock:
                    self._limits.pop(ident, None)
            except TaskTimeout:
                landed = True  # the pending one arrived right here: nothing more can come
            if entry.fired and not landed:
                _raise_in(ident, None)
        if entry.fired:
            # The job caught the timeout (or it was withdrawn just above): still a timeout.
            raise TaskTimeout(f"soft timeout ({seconds:g}s)")

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._watch, name="soft-timeouts", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while True:
            now = time.monotonic()
            with self._lock:
                for ident, entry in self._limits.items():
                    if not entry.fired and entry.deadline <= now:
                        entry.fired = True  # once per limit: a job is told only once
                        _raise_in(ident, TaskTimeout)
                upcoming = [e.deadline for e in self._limits.values() if not e.fired]
            wait = min(upcoming) - now if upcoming else 60.0
            self._wake.wait(max(0.01, min(wait, 60.0)))
            self._wake.clear()


soft_timeouts = SoftTimeouts()
