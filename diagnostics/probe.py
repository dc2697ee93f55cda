"""``diagnostics.probe``: a task type for checking a deployment end to end.

Context: ``{"units": N, "fail_every": k, "vendor_fail_every": j, "crash_every": c,
"sleep_ms": m}``, whole numbers, absent keys 0 (never), ``m`` at most a day; any other key
or value is refused before a run exists. Unit i (from 1) sleeps m ms, then fails with a
domain error if k divides i, else with a driver-style error carrying fake secrets if j
divides i, else crashes (a KeyError raised from the probe's own code) if c divides i, else succeeds.
The same unit fails the same way on every attempt.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy.exc import OperationalError

from taskrunner.contract import (
    ContextError,
    TaskOptions,
    TaskReportableError,
    TaskUnit,
    UnitJob,
    check_context,
)

TYPE = "diagnostics.probe"
FAKE_SECRET = "sk_live_PROBE_SECRET"
FAKE_CARD = "4111 1111 1111 1111"
CONTEXT = dict.fromkeys(
    ("units", "fail_every", "vendor_fail_every", "crash_every", "sleep_ms"), int
)
# Ten times the largest run measured (bench/bench_million.py); a typo's trillion would
# fill the disk in the run's one transaction before anyone could cancel it.
MAX_UNITS = 10_000_000
# A day, longer than any unit's timeout; a larger sleep no clock holds (an OverflowError
# crashed every unit of a run its context had let start).
MAX_SLEEP_MS = 86_400_000


class ProbeFailed(TaskReportableError):
    pass


def check_counts(type_: str, context: Mapping[str, Any], keys: Iterable[str]) -> None:
    """None of ``keys`` negative (whole numbers, checked before), at most ``MAX_UNITS`` units
    and a sleep of at most ``MAX_SLEEP_MS``."""
    for key in keys:
        if context.get(key, 0) < 0:
            raise ContextError(f"{type_}: the context key {key!r} must not be negative")
    if context.get("units", 0) > MAX_UNITS:
        raise ContextError(f"{type_}: at most {MAX_UNITS:,} units, not {context['units']:,}")
    if context.get("sleep_ms", 0) > MAX_SLEEP_MS:
        raise ContextError(
            f"{type_}: the context key 'sleep_ms' is at most {MAX_SLEEP_MS:,} (a day), "
            f"not {context['sleep_ms']:,}"
        )


def _number(context: Mapping[str, Any], key: str) -> int:
    value = context.get(key) or 0
    return int(value)


def unit_number(unit: TaskUnit) -> int:
    return int(unit.key.rsplit("-", 1)[1])


def _read_settings(settings: Mapping[str, Any], i: int) -> Any:
    """A bug on purpose: a key no one set (its message and locals are never kept)."""
    return settings[f"missing-setting-{i}"]


class ProbeTask:
    def type(self) -> str:
        return TYPE

    def validate(self, context: Mapping[str, Any]) -> None:
        """Whole numbers of the keys it reads, none negative; anything else is refused."""
        check_context(self.type(), context, optional=CONTEXT)
        check_counts(self.type(), context, CONTEXT)

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, _number(context, "units") + 1):
            yield TaskUnit(f"probe-{i}")

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        i = unit_number(unit)
        fail_every = _number(context, "fail_every")
        vendor_every = _number(context, "vendor_fail_every")
        crash_every = _number(context, "crash_every")
        sleep_ms = _number(context, "sleep_ms")

        def probe() -> None:
            if sleep_ms:
                time.sleep(sleep_ms / 1000)
            if fail_every and i % fail_every == 0:
                raise ProbeFailed(f"probe unit {i} failed")
            if vendor_every and i % vendor_every == 0:
                # A driver error: its message carries SQL and bound values, like the real ones.
                raise OperationalError(
                    "UPDATE vendor_accounts SET token=%(token)s WHERE card=%(card)s",
                    {"token": FAKE_SECRET, "card": FAKE_CARD},
                    ConnectionError(f"server closed the connection; token={FAKE_SECRET}"),
                )
            if crash_every and i % crash_every == 0:
                _read_settings({"token": FAKE_SECRET}, i)

        return probe

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=600)


VENDOR_TYPE = "diagnostics.vendor_probe"


class VendorProbeTask(ProbeTask):
    """The probe as a unit that waits on a vendor: routed to the I/O lane (tasks/routing.py).

    Same context and outcomes as ``diagnostics.probe``; ``sleep_ms`` stands for the
    vendor's answer time.
    """

    def type(self) -> str:
        return VENDOR_TYPE

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=120)
