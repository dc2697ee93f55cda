"""A unit's reason folded as its error group: numbers, identifiers and error references replaced.

Digits and error references vary between otherwise identical reasons ("probe unit 7
failed", "unhandled …Error — see logs, ref 3f9c0a1b"), and so do identifiers: a vendor's
request id (a UUID), a pointer (0x7f3a9c1e), a digest. An identifier is a UUID, 0x and
hex digits, or a token of hex digits (between characters that are not ASCII letters or
digits) of 16 or more, or of 8 or more with a digit and a letter: a word of the letters a
to f alone ("decade", "deadbeef") is no identifier, nor is a short token ("3a", "ed25519"
keeps its letters). A period (2026-11) is not a number that varies: "no statement for
2026-10" and "… for 2026-11" are two groups, and each says which month.

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


_HEX = "[0-9a-fA-F]"
_TOKEN_START, _TOKEN_END = "(?<![0-9A-Za-z])", "(?![0-9A-Za-z])"
# Every branch spans a whole token, so the first branch that matches (Python) is also the
# longest (PostgreSQL): a UUID's first eight digits alone are never taken for a token.
_IDENTIFIER = re.compile(
    _TOKEN_START
    + "(?:"
    + "|".join(
        (
            rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
            rf"0[xX]{_HEX}+",
            rf"(?={_HEX}*[0-9])(?={_HEX}*[a-fA-F]){_HEX}{{8,}}",
            rf"{_HEX}{{16,}}",
        )
    )
    + ")"
    + _TOKEN_END
)
# Every identifier holds eight hex digits in a row or starts with 0x.
_MAY_HOLD_AN_IDENTIFIER = rf"{_HEX}{{8}}|0[xX]"


def normalize_reason(reason: str | None) -> str:
    return fold_numbers(_IDENTIFIER.sub("#", reason or ""))


def fold_numbers(reason: str) -> str:
    """The fold of numbers and error references alone (the fold before ``0023``)."""
    return _VARYING.sub("#", reason)


def stored_reason(reason: str | None) -> dict[str, str | None]:
    """The values of a unit's reason and its fold (None clears both)."""
    return {
        "last_error": reason,
        "reason_fold": None if reason is None else normalize_reason(reason),
    }


def may_hold_an_identifier(reason: Any) -> Any:
    """Whether a text expression may hold an identifier (the others fold as before)."""
    return reason.op("~")(_MAY_HOLD_AN_IDENTIFIER)


def fold_sql(reason: Any) -> Any:
    """``normalize_reason`` in PostgreSQL's SQL, of a text expression (NULL stays NULL)."""
    return numbers_sql(
        case(
            (
                may_hold_an_identifier(reason),
                func.regexp_replace(reason, _IDENTIFIER.pattern, "#", "g"),
            ),
            else_=reason,
        )
    )


def numbers_sql(reason: Any) -> Any:
    """``fold_numbers`` in PostgreSQL's SQL."""
    plain = func.regexp_replace(reason, r"\d+", "#", "g")
    return case(
        (
            reason.op("~")(_NEEDS_LOOKAROUNDS),
            func.regexp_replace(reason, _VARYING.pattern, "#", "g"),
        ),
        else_=plain,
    )
