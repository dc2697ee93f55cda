"""A unit's reason folded as its error group: numbers and error references replaced.

Digits and error references vary between otherwise identical reasons ("probe unit 7
failed", "unhandled …Error — see logs, ref 3f9c0a1b"). A period (2026-11) is not a
number that varies: "no statement for 2026-10" and "… for 2026-11" are two groups, and
each says which month.

The fold is stored beside the reason (``task_run_units.reason_fold``), written with it
by every statement that writes a reason (``stored_reason``): grouping 25,000 failed
units then reads a column instead of running a regular expression on each. Bulk writes
on PostgreSQL (a migration's backfill, a benchmark's fill) use ``fold_sql``, the same
fold in SQL; a property test holds the two to the same answer.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import case, func

from security.refs import REF_CODE

_PERIOD = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])(?!\d)"
_MONTH_OF_A_PERIOD = r"(?<=(?<!\d)(?:19|20)\d\d-)(?:0[1-9]|1[0-2])(?!\d)"
_REFERENCE = rf"(?<=ref ){REF_CODE}"
# Python takes the first branch that matches, PostgreSQL the longest: the number branch
# steps aside where a reference starts, so both engines fold "ref 123458779e14" alike.
_VARYING = re.compile(
    rf"{_REFERENCE}|(?<!\d)(?!{_PERIOD})(?!{_MONTH_OF_A_PERIOD})(?!{_REFERENCE})\d+"
)
# PostgreSQL runs that pattern's lookarounds at some 12 µs a reason. A reason with no
# period and no "ref " folds the same with one plain pattern (\d+), ten times faster.
_NEEDS_LOOKAROUNDS = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])|ref "


def normalize_reason(reason: str | None) -> str:
    return _VARYING.sub("#", reason or "")


def stored_reason(reason: str | None) -> dict[str, str | None]:
    """The values of a unit's reason and its fold (None clears both)."""
    return {
        "last_error": reason,
        "reason_fold": None if reason is None else normalize_reason(reason),
    }


def fold_sql(reason: Any) -> Any:
    """``normalize_reason`` in PostgreSQL's SQL, of a text expression (NULL stays NULL)."""
    plain = func.regexp_replace(reason, r"\d+", "#", "g")
    return case(
        (
            reason.op("~")(_NEEDS_LOOKAROUNDS),
            func.regexp_replace(reason, _VARYING.pattern, "#", "g"),
        ),
        else_=plain,
    )
