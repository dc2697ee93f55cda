"""What a run's units may hold, checked when the run starts and shared with the pages.

A unit key is stored in a ``VARCHAR(191)``, shown on pages and typed into URLs; a
tenant id in a ``BIGINT``. PostgreSQL refuses what those columns cannot hold with a
driver error (a key too long, a NUL, a lone surrogate, an id beyond 64 bits) and SQLite
stores it anyway, so a key a page could never reach stayed in the ledger. One rule
decides instead, before any row is committed: ``checked_units`` refuses a run naming its
first offending unit, and the unit page answers 404 for exactly the keys
``key_problem`` refuses, so every key a run can hold has a page.

"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from security.echo import echo
from taskrunner.types import TaskUnit, UnitError

MAX_KEY_LENGTH = 191  # task_run_units.unit_key
TENANT_ID_RANGE = range(-(2**63), 2**63)  # task_run_units.tenant_id, a signed 64-bit integer
# C0 and C1 control characters (NUL included: PostgreSQL cannot store it in text) and
# lone surrogates (no encoding can write them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a unit key, or None when it can."""
    if not isinstance(key, str):
        return f"is {type(key).__name__}, not a text"
    if not key:
        return "is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"is longer than {MAX_KEY_LENGTH} characters ({len(key)})"
    if _CONTROL.search(key):
        return "holds a control character"
    if _SURROGATE.search(key):
        return "holds a lone surrogate"
    return None


def tenant_problem(tenant_id: object) -> str | None:
    """Why ``tenant_id`` cannot be a unit's tenant id, or None when it can (None included)."""
    if tenant_id is None:
        return None
    if not isinstance(tenant_id, int) or isinstance(tenant_id, bool):
        return f"is {type(tenant_id).__name__}, not a whole number"
    if tenant_id not in TENANT_ID_RANGE:
        return "is outside the range of a 64-bit integer"
    return None


def shown(key: object) -> str:
    """A key as one printable line of an error message, however long or strange."""
    return echo(key) if isinstance(key, str) else repr(key)


def checked_units(units: Iterable[TaskUnit]) -> Iterator[TaskUnit]:
    """The units of a run about to start, each checked as it streams past; ``UnitError``
    names the first bad one.

    A generator, so a run of a million units is never a list in memory: the ledger
    writes them as they come, in the run's one transaction, and a refusal rolls that
    transaction back (nothing is written). Only the keys are kept, to find a duplicate.
    """
    seen: set[str] = set()
    for position, unit in enumerate(units, start=1):
        if not isinstance(unit, TaskUnit):  # else an AttributeError, "could not be recorded"
            raise UnitError(f"unit {position} is {type(unit).__name__}, not a TaskUnit")
        problem = key_problem(unit.key)
        if problem is not None:
            raise UnitError(f"unit {position}: the unit key {shown(unit.key)} {problem}")
        problem = tenant_problem(unit.tenant_id)
        if problem is not None:
            raise UnitError(
                f"unit {position}: the tenant id of unit key {shown(unit.key)} {problem}"
            )
        if unit.key in seen:
            raise UnitError(f"unit {position}: the unit key {shown(unit.key)} is there twice")
        seen.add(unit.key)
        yield unit


def possible_keys(keys: Iterable[str]) -> list[str]:
    """The keys among ``keys`` a run could hold: an operator's selection of units to act
    on, the others matching no unit (PostgreSQL would refuse to compare some of them)."""
    return [key for key in keys if key_problem(key) is None]
