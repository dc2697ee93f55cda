"""The alert rules' settings, read from the app's config (``config.py`` has the defaults).

Lists are written ``name=value`` separated by commas; ``*`` names every other one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RULES = (
    "run_failed",
    "stale_units",
    "schedule_missed",
    "deliveries_parked",
    "queue_long_wait",
    "consumer_lost",
)
CHANNELS = ("slack", "webhook", "email")


class SettingError(ValueError):
    """A malformed alert setting, named with the part that could not be read."""


def pairs(name: str, raw: str) -> dict[str, str]:
    """``a=1,b=2`` as a dict; a part without ``=`` is refused."""
    found: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (raw or "").split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise SettingError(f"{name}: {part!r} is not name=value")
        found[key.strip()] = value.strip()
    return found


@dataclass(frozen=True, slots=True)
class RunThreshold:
    """A run alerts when at least ``units`` failed and their share is at least ``share``."""

    units: int = 1
    share: float = 0.0

    def exceeded(self, failed: int, total: int) -> bool:
        share = failed / total if total else 1.0
        return failed >= max(self.units, 1) and share >= self.share


@dataclass(frozen=True, slots=True)
class AlertSettings:
    enabled: frozenset[str]
    run_threshold: RunThreshold
    run_thresholds: dict[str, RunThreshold]
    stale_units: int
    stale_minutes: float
    clear_minutes: float
    remind_minutes: float
    queue_wait_minutes: dict[str, float]
    parked_deliveries: int
    routes: dict[str, tuple[str, ...]]

    def threshold_of(self, type_: str) -> RunThreshold:
        return self.run_thresholds.get(type_, self.run_threshold)

    def queue_wait_of(self, queue: str) -> float:
        """Minutes the oldest pending unit of ``queue`` may wait (0: the rule is off)."""
        return self.queue_wait_minutes.get(queue, self.queue_wait_minutes.get("*", 0.0))

    def channels_of(self, rule: str) -> tuple[str, ...]:
        return self.routes.get(rule, self.routes.get("*", CHANNELS))


def _threshold(name: str, key: str, raw: str) -> RunThreshold:
    units, _, share = raw.partition(":")
    try:
        threshold: RunThreshold | None = RunThreshold(int(units or 1), float(share or 0))
    except ValueError:
        threshold = None
    # nan, inf and a share over 1 parse, and no run ever reaches them: the type's alerts
    # would be off.
    if threshold is None or threshold.units < 0 or not 0 <= threshold.share <= 1:
        raise SettingError(
            f"{name}: {f'{key}={raw}'!r} is not units[:share]"
            " (a whole number 0 or more, and a share from 0 to 1)"
        )
    return threshold


def _minutes(name: str, key: str, raw: str) -> float:
    try:
        minutes = float(raw)
    except ValueError:
        minutes = math.nan
    # nan, inf and a negative number parse, and each would turn the rule off unsaid.
    if not 0 <= minutes < math.inf:
        raise SettingError(f"{name}: {f'{key}={raw}'!r} is not a number of minutes (0: off)")
    return minutes


def _listed(config: Mapping[str, Any], name: str) -> dict[str, str]:
    return pairs(name, config[name])


def read(config: Mapping[str, Any]) -> AlertSettings:
    """The rules' settings of ``config``; a malformed one raises ``SettingError``."""
    enabled = {name.strip() for name in config["ALERT_RULES"].split(",") if name.strip()}
    if unknown := enabled - set(RULES):
        raise SettingError(f"ALERT_RULES: unknown rule {sorted(unknown)[0]!r}")
    routes: dict[str, tuple[str, ...]] = {}
    for rule, names in pairs("ALERT_ROUTES", config["ALERT_ROUTES"]).items():
        channels = tuple(n for n in names.replace("+", " ").split() if n)
        if rule != "*" and rule not in RULES:
            raise SettingError(f"ALERT_ROUTES: unknown rule {rule!r}")
        if bad := set(channels) - set(CHANNELS):
            raise SettingError(f"ALERT_ROUTES: unknown channel {sorted(bad)[0]!r}")
        routes[rule] = channels
    return AlertSettings(
        enabled=frozenset(enabled),
        run_threshold=RunThreshold(
            int(config["ALERT_RUN_FAILED_MIN_UNITS"]),
            float(config["ALERT_RUN_FAILED_MIN_SHARE"]),
        ),
        run_thresholds={
            type_: _threshold("ALERT_RUN_FAILED_TYPES", type_, raw)
            for type_, raw in _listed(config, "ALERT_RUN_FAILED_TYPES").items()
        },
        stale_units=int(config["ALERT_STALE_UNITS"]),
        stale_minutes=float(config["ALERT_STALE_MINUTES"]),
        clear_minutes=float(config["ALERT_CLEAR_MINUTES"]),
        remind_minutes=float(config["ALERT_REMIND_MINUTES"]),
        queue_wait_minutes={
            queue: _minutes("ALERT_QUEUE_WAIT_MINUTES", queue, raw)
            for queue, raw in _listed(config, "ALERT_QUEUE_WAIT_MINUTES").items()
        },
        parked_deliveries=int(config["ALERT_PARKED_DELIVERIES"]),
        routes=routes,
    )
