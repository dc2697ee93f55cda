"""What the ``flask tasks …`` options accept: a JSON context, a number of seconds."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from security.echo import echo

MAX_WAIT_SECONDS = 86_400


def _constant(text: str) -> float:
    if not math.isfinite(number := float(text)):  # NaN, 1e400: no JSON column stores them
        raise ValueError(f"{text[:40]} is not a finite number")
    return number


def _members_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # The parser keeps the last of two: '{"units": 3, …, "units": 100000}' ran 100,000.
    members: dict[str, Any] = {}
    for key, value in pairs:
        if key in members:
            raise ValueError(f"the key {echo(key)} is there twice")
        members[key] = value
    return members


def context(_ctx: Any, _param: Any, value: str | None) -> dict[str, Any]:
    """``--context``: a JSON object of finite numbers, each key once, else a usage error."""
    if value is None:
        return {}
    try:
        parsed = json.loads(
            value,
            parse_float=_constant,
            parse_constant=_constant,
            object_pairs_hook=_members_once,
        )
    except RecursionError:
        raise click.BadParameter("not JSON: nested too deeply") from None
    except ValueError as exc:  # a JSONDecodeError, or a number no JSON column stores
        raise click.BadParameter(f"not JSON: {getattr(exc, 'msg', exc)}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed


def wait_seconds(_ctx: Any, _param: Any, value: float | None) -> float | None:
    """``--wait``: seconds from 0 to a day (a range lets NaN through: it compares false)."""
    if value is not None and not 0 <= value <= MAX_WAIT_SECONDS:
        raise click.BadParameter(
            f"{value:g} is not a number of seconds from 0 to {MAX_WAIT_SECONDS}"
        )
    return value
