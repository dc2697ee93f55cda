"""Query parameters an operator types: checked here so that bad input is a 400, never a 500."""

from __future__ import annotations

from flask import abort, request
from werkzeug.routing import IntegerConverter

from security.echo import echo
from taskrunner.contract import operations, unit_key_problem

MAX_TEXT = 191
# An error group's reason as the groups show it: a stored message is cut to 500
# characters (``taskrunner/redaction.py``) and folding only shortens it; the margin is
# for what a browser or a client adds around a pasted reason.
MAX_REASON = 600
BIGINT = 2**63 - 1


def _clean(value: str, keep: str = "") -> str:
    # PostgreSQL refuses NUL in text; other control characters are never part of a key.
    if any(ord(c) < 32 and c not in keep for c in value):
        abort(400, description="control characters are not allowed in parameters")
    return value


def exact(name: str, max_length: int = MAX_TEXT) -> str | None:
    """The parameter as sent; empty is absent. For what names a stored value (a unit key,
    a cursor): a key may begin or end with spaces, and trimmed it names another unit."""
    raw = request.args.get(name, "")
    if len(raw) > max_length:
        abort(400, description=f"{name} is longer than {max_length} characters")
    return _clean(raw) or None


def text(name: str, max_length: int = MAX_TEXT) -> str | None:
    """The parameter with surrounding spaces trimmed; blank is absent.

    Length and control characters are checked on the value as sent, before trimming,
    as the OpenAPI documents describe it.
    """
    return (exact(name, max_length) or "").strip() or None


def checked_reason(raw: str, name: str = "reason") -> str:
    """An error group's reason as a client sent it (a query parameter, a form field).

    As long as any group the app lists, and with the newlines and tabs a stored reason
    keeps (a form sends a newline as CRLF); any other control character is a 400.
    """
    if len(raw) > MAX_REASON:
        abort(400, description=f"{name} is longer than {MAX_REASON} characters")
    return _clean(raw.replace("\r\n", "\n"), keep="\n\t")


def reason() -> str | None:
    """The ``reason`` filter as sent (a reason may end in a space or a newline); empty is
    absent."""
    return checked_reason(request.args.get("reason", "")) or None


def group_cursor() -> str | None:
    """An error groups' ``cursor``: the last group's reason, as long as a reason may be."""
    return checked_reason(request.args.get("cursor", ""), "cursor") or None


def choice(name: str, allowed: tuple[str, ...]) -> str | None:
    value = text(name)
    if value is not None and value not in allowed:
        abort(400, description=f"unknown {name} {echo(value)}; one of: {', '.join(allowed)}")
    return value


def run_status() -> str | None:
    return choice("status", operations.RUN_STATUSES)


def unit_status(name: str = "unit_status") -> str | None:
    return choice(name, operations.UNIT_STATUSES)


def _digits(raw: str, most: int) -> bool:
    # As sent, untrimmed: what a document's "integer" admits; no 4,000-digit int() either.
    return raw.isascii() and raw.isdigit() and len(raw) <= 19 and int(raw) <= most


def limit(default: int = 50, maximum: int = 200) -> int:
    raw = request.args.get("limit", "")
    if not raw:
        return default
    if not _digits(raw, maximum) or int(raw) < 1:
        abort(400, description=f"limit must be a whole number from 1 to {maximum}")
    return int(raw)


def page(maximum: int = 50) -> int:
    """A 1-based page number (``page``), bounded: a search pages through its first matches."""
    raw = request.args.get("page", "")
    if not raw:
        return 1
    if not _digits(raw, maximum) or int(raw) < 1:
        abort(400, description=f"page must be a whole number from 1 to {maximum}")
    return int(raw)


def tenant(name: str = "tenant") -> int | None:
    raw = request.args.get(name, "")
    if not raw:
        return None
    if not _digits(raw, BIGINT):
        abort(400, description=f"{name} must be a tenant id (a whole number)")
    return int(raw)


def form_id(name: str, what: str) -> int | None:
    """An id a confirmation carries back in its form (None: a form posted without one)."""
    raw = request.form.get(name)
    if raw is None:
        return None
    if not _digits(raw, BIGINT):
        abort(400, description=f"{name} must be the id of {what}")
    return int(raw)


def cursor(name: str = "cursor") -> str | None:
    return exact(name, max_length=MAX_TEXT + 40)


def unit_key(name: str = "key") -> str | None:
    return exact(name)


def run_uuid_or_404(value: str) -> str:
    """The uuid in its stored (lower-case) form: a uuid pasted in capitals is the same run."""
    lowered = value.lower()
    if not operations.is_uuid(lowered):
        abort(404, description="no such run")
    return lowered


def unit_key_or_404(value: str) -> str:
    """A unit key from a URL: any key a run may hold (the rule runs start with), else 404."""
    if unit_key_problem(value) is not None:
        abort(404, description="no such unit")
    return value


class AsciiIntegerConverter(IntegerConverter):
    """``<int:…>`` in a route: the digits 0-9 only. Werkzeug's own matches ``\\d``, which
    takes other scripts' digits too (``١`` and ``１`` read as 1): a second address for
    every id, where the documents promise an integer and anything else is a 404."""

    regex = r"[0-9]+"
