"""What the queues keep after the runs they served are gone, and its removal at prune time.

Huey keeps small keys in each queue's result store that nothing else removes:

- revoke keys (``r:<task id>``): a cancel revokes every queued unit job, and a revoked
  job skipped at dequeue leaves its key behind for good;
- results (``<task id>``) of unit jobs or single tracked jobs, when a queue stores them;
- rate-limit windows (``<queue>.rl.task-runner.<type>.w`` and their counters) of
  windows that have passed;
- locks (``<queue>.lock.<name>``) whose name carries the uuid of a run being pruned:
  such a run is terminal, so its lock is finished.

A unit job's key names ``u<unit id>.<dispatch token>``; it is kept only while that
unit is active with that token (its job may still be queued), so removing the rest
can never let a revoked job run twice: its gate refuses a superseded token anyway.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from flask import current_app

from taskrunner.dispatch import RATE_LIMIT_PREFIX
from taskrunner.ledger import ledger
from tasks.huey_internals import REVOKE_PREFIX, delete_many, lock_prefix, rate_limit_windows
from tasks.queues import queues

UNIT_TASK = re.compile(rf"^(?:{REVOKE_PREFIX})?u(\d+)\.([0-9a-f]{{32}})$")


def clear_leftovers(run_uuids: Iterable[str] = (), dispatch_uuids: Iterable[str] = ()) -> int:
    """Delete the leftovers of every queue; return how many keys went."""
    finished_runs = set(run_uuids)
    finished_dispatches = set(dispatch_uuids)
    removed = 0
    for huey in queues().all().values():
        removed += _clear_queue(huey, finished_runs, finished_dispatches)
    return removed


def _clear_queue(huey: Any, finished_runs: set[str], finished_dispatches: set[str]) -> int:
    keys = list(huey.storage.result_items())
    windows = rate_limit_windows(huey, keys, RATE_LIMIT_PREFIX)
    unit_keys: dict[tuple[int, str], list[str]] = {}
    doomed: list[str] = []
    for key in keys:
        match = UNIT_TASK.match(key)
        if match:
            unit_keys.setdefault((int(match[1]), match[2]), []).append(key)
        elif key.removeprefix(REVOKE_PREFIX) in finished_dispatches:
            doomed.append(key)
        elif key.startswith(lock_prefix(huey)) and any(u in key for u in finished_runs):
            doomed.append(key)
        elif key in windows and _window_passed(huey, key):
            doomed.append(key)
    if unit_keys:
        live = ledger.transitions.live_unit_tokens(unit_keys)
        for pair, names in unit_keys.items():
            if pair not in live:
                doomed.extend(names)
    removed = delete_many(huey, doomed)
    for key in doomed:
        if key in windows:
            huey.storage.delete_counter(windows[key])
    return removed


def _window_passed(huey: Any, key: str) -> bool:
    per = current_app.config["TASK_RUNNER_RATE_WINDOW_SECONDS"]
    stored = huey.get(key, peek=True)
    # A fixed window is numbered int(now) // per; an older number is over for good.
    return not isinstance(stored, int) or stored < int(time.time()) // per
