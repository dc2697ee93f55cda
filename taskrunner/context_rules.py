"""What a run's context may hold: JSON the ledger stores as it was given, on any database.

A context is stored in a JSON column, read back by every unit's job and shown on the
run's page. A lone surrogate made that page a 500 (no encoding writes it), a NUL and a
NaN are refused by PostgreSQL (as a driver error, after the type had accepted them), a
datetime or a set made the insert fail with "could not be recorded", and a key of 5
became "5" for the jobs while the type's ``validate`` and ``units`` had read 5. One rule
refuses them all as a context error, before the type reads the context.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from security.echo import echo
from taskrunner.types import ContextError

_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character"
    if _SURROGATE.search(text):
        return "a lone surrogate"
    return None


def value_problem(value: Any) -> str | None:
    """Why ``value`` is no JSON a database stores as it is, or None; walked without
    recursion, so a context nested as deep as the JSON parser allows is no RecursionError."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
        elif item is None or isinstance(item, bool | int):
            problem = None
        elif isinstance(item, float):
            problem = None if math.isfinite(item) else f"{item!r}, not a finite number"
        elif isinstance(item, list | tuple):
            pending.extend(item)
            continue
        elif isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    return f"a key that is {type(key).__name__}, not a text"
                if (problem := _text_problem(key)) is not None:
                    return problem
            pending.extend(item.values())
            continue
        else:
            problem = f"a {type(item).__name__}, not JSON"
        if problem is not None:
            return problem
    return None


def check_storable(type_: str, context: object) -> None:
    """Refuse (``ContextError``, naming the top-level key) a context the ledger cannot
    store as it is."""
    if not isinstance(context, Mapping):
        raise ContextError(
            f"{type_}: the context must be a JSON object, not {type(context).__name__}"
        )
    for key, value in context.items():
        if not isinstance(key, str):
            raise ContextError(f"{type_}: a context key must be a text, not {type(key).__name__}")
        problem = _text_problem(key) or value_problem(value)
        if problem is not None:
            raise ContextError(f"{type_}: the context key {echo(key)} holds {problem}")
