"""Waiting for a condition another process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class WaitTimeout(AssertionError, TimeoutError):
    """A condition that did not come in time: a failed assertion in a test, a timeout
    in a benchmark."""


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that.

    ``detail``: what the failure should also say (what was left, a process's log), read
    only when the time is up.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = f"; {detail()}" if detail is not None else ""
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {message}{said}")
        time.sleep(interval)
