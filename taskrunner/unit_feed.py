"""A run's units produced beside the transaction that writes them.

PostgreSQL spends longer storing a unit (its row, seven index entries, the reference to
its run) than Python spends making, checking and formatting it, so a million-unit run
is persisted fastest when both work at once. The definition's generator runs in a
thread of its own, under an app context of its own: what it reads from the database
goes through a session and connection of its own, outside the run's transaction (as
when the units were all listed before it), and never lands in the middle of the COPY
that is streaming on the run's connection. At most ``ahead`` chunks wait in memory.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

from flask import current_app

T = TypeVar("T")
_END = object()


def prefetched(items: Iterable[T], chunk: int = 5000, ahead: int = 2) -> Iterator[T]:
    """``items`` in their order, iterated in a helper thread in chunks of ``chunk``.

    What the iteration raises is raised here, at the point it was reached; a caller that
    stops early (its transaction failed) stops the helper too.
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    handoff: queue.Queue[object] = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def send(value: object) -> bool:
        while not stop.is_set():
            try:
                handoff.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        batch: list[T] = []
        with app.app_context():
            try:
                for item in items:
                    batch.append(item)
                    if len(batch) >= chunk:
                        if not send(batch):
                            return
                        batch = []
                end: object = _END
            except BaseException as exc:  # handed to the caller, after the items before it
                end = exc
            if not batch or send(batch):
                send(end)

    helper = threading.Thread(target=produce, name="unit-feed", daemon=True)
    helper.start()
    try:
        while True:
            value = handoff.get()
            if value is _END:
                return
            if isinstance(value, BaseException):
                raise value
            yield from value  # type: ignore[misc]
    finally:
        stop.set()
        helper.join()
