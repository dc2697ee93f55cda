"""Periodic tasks run once per schedule slot, whatever the number of schedulers.

Before a periodic task works, it claims its slot through the app's **slot keeper**:
the runner's ledger inserts the row (task name, slot) and its primary key lets one
insert through, so every other consumer that enqueued the same slot finds it taken
and skips. Two hosts with periodic tasks on (a standby started before the old host
is gone, a host that came back) therefore never sweep twice. The claim is in the
ledger's database, so it holds on every queue driver. A consumer stopping before or in
the body (a deploy's SIGTERM raises wherever the worker is) hands the slot back: the
keeper makes it claimable again, if this worker holds it, and the job is enqueued anew
for it and the slots it still owed; a body that ran has its end recorded, once more if
the stop cut that record short. A slot whose body crashed (its worker or its host
killed) is not run again: the next slot catches up (every periodic task is a catch-up
sweep), and the runner's stuck sweep ends it failed.

The wiring knows the keeper by this protocol only (it imports nothing of the runner);
the runner binds its own when the app is made. The keeper also says whether a
schedule is paused (checked at each slot: every scheduler honours a pause at its
next check) and records how each slot ended.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Protocol

from flask import Flask

KEEPER = "tasks.slot_keeper"


class SlotKeeper(Protocol):
    def paused(self, name: str, slot: datetime, host: str) -> bool:
        """True (and the slot recorded as paused) when ``name`` is paused."""

    def claim(
        self, name: str, slot: datetime, host: str, enqueued_at: datetime | None, initiator: str
    ) -> bool:
        """True for the one caller that may run ``name`` for ``slot``; False for every other."""

    def finished(
        self, name: str, slot: datetime, error: BaseException | None, run_uuid: str | None
    ) -> None:
        """Record how the slot's body ended (``error``: what it raised)."""

    def handed_back(self, name: str, slot: datetime, host: str) -> bool:
        """The consumer stopped the slot's body (or its claim) on ``host``: True when the
        slot may be claimed again (the caller enqueues it anew); False when it is finished
        (its run was recorded). A slot another worker claimed is left as it is."""


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def bind(app: Flask, keeper: SlotKeeper) -> None:
    app.extensions[KEEPER] = keeper


def keeper(app: Flask) -> SlotKeeper:
    return app.extensions[KEEPER]
