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
) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)
