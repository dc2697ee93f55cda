"""Query parameters an operator types: checked here so that bad input is a 400, never a 500."""

from __future__ import annotations

from flask import abort, request

from taskrunner.queries import RUN_STATUSES, UNIT_STATUSES, is_uuid

MAX_TEXT = 191
BIGINT = 2**63 - 1


def _clean(value: str) -> str:
    # PostgreSQL refuses NUL in text; other control characters are never part of a key.
    if any(ord(c) < 32 for c in value):
        abort(400, description="control characters are not allowed in parameters")
    return value


def text(name: str, max_length: int = MAX_TEXT) -> str | None:
    value = request.args.get(name, "").strip()
    if not value:
        return None
    if len(value) > max_length:
        abort(400, description=f"{name} is longer than {max_length} characters")
    return _clean(value)


def choice(name: str, allowed: tuple[str, ...]) -> str | None:
    value = text(name)
    if value is not None and value not in allowed:
        abort(400, description=f"unknown {name} {value!r}; one of: {', '.join(allowed)}")
    return value


def run_status() -> str | None:
    return choice("status", RUN_STATUSES)


def unit_status(name: str = "unit_status") -> str | None:
    return choice(name, UNIT_STATUSES)


def limit(default: int = 50, maximum: int = 200) -> int:
    raw = request.args.get("limit", "").strip()
    if not raw:
        return default
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= maximum:
        abort(400, description=f"limit must be a whole number from 1 to {maximum}")
    return int(raw)


def tenant(name: str = "tenant") -> int | None:
    raw = request.args.get(name, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > BIGINT:
        abort(400, description=f"{name} must be a tenant id (a whole number)")
    return int(raw)


def cursor(name: str = "cursor") -> str | None:
    return text(name, max_length=MAX_TEXT + 40)


def run_uuid_or_404(value: str) -> str:
    if not is_uuid(value):
        abort(404, description="no such run")
    return value


def unit_key_or_404(value: str) -> str:
    if not value or len(value) > MAX_TEXT or any(ord(c) < 32 for c in value):
        abort(404, description="no such unit")
    return value
