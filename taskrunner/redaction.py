"""What an exception may leave in the ledger and on events.

A domain error keeps its message, scrubbed and truncated. "Domain" is an explicit
marker, never where a class's file lies (an install puts vendor packages next to
ours): a ``TaskReportableError``, or a class a module registered with
``taskrunner.contract.register_domain_error``. Anything else -- driver,
framework, HTTP client -- carries SQL, bound values or tokened URLs in its
message, so only its class name is kept, with a short error reference; the full
exception goes to the log, whose line carries the same reference
(``security.refs``), so an operator finds that entry.

Every stored reason is cut to ``MAX_LENGTH`` as the last step, after any prefix
a caller adds (``bounded``), so no stored text can exceed the limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Flask, current_app, has_app_context

from security.refs import error_ref
from taskrunner.types import TaskReportableError

MAX_LENGTH = 500
SCRUBBER = "taskrunner.scrubber"

# Declared by class decorators at import: what a class is does not depend on the app.
_domain_errors: set[type[BaseException]] = set()


def _pass_through(text: str) -> str:
    return text


def init_app(app: Flask) -> None:
    app.extensions[SCRUBBER] = _pass_through


def bind_scrubber(scrubber: Callable[[str], str]) -> None:
    """Replace the app's pass-through scrubber applied to every kept error message."""
    current_app.extensions[SCRUBBER] = scrubber


def scrub(text: str) -> str:
    """``text`` through the scrubber of the app in context; with no app, none was bound."""
    if not has_app_context():
        return text
    return current_app.extensions.get(SCRUBBER, _pass_through)(text)


E = TypeVar("E", bound=type[BaseException])


def register_domain_error(cls: E) -> E:
    """Declare an exception class whose message an operator may read (a class decorator).

    Its message is kept in the ledger after the scrubber, like a ``TaskReportableError``;
    any other exception is stored by class name only.
    """
    _domain_errors.add(cls)
    return cls


def is_domain_error(exc: BaseException) -> bool:
    return isinstance(exc, TaskReportableError) or any(
        isinstance(exc, cls) for cls in _domain_errors
    )


def bounded(reason: str) -> str:
    """A reason cut to the stored limit: apply it last, after every prefix."""
    return reason[:MAX_LENGTH]


def redact(exc: BaseException) -> str:
    """The operator-safe reason for ``exc``."""
    if is_domain_error(exc):
        message = str(exc) or type(exc).__name__
        return bounded(scrub(message))
    cls = type(exc)
    return f"unhandled {cls.__module__}.{cls.__qualname__} — see logs, ref {error_ref(exc)}"


# What a stored reason says about a retry (the error groups page and its JSON).
VENDOR, DOMAIN, EXPIRED_KIND = "vendor", "domain", "expired"
_VENDOR_PREFIXES = ("unhandled ", "timeout: ", "dispatch failed: unhandled ")


def reason_kind(reason: str | None) -> str:
    """``vendor``: an error of a driver, framework or client (``unhandled … see logs``, a
    timeout), often transient, worth a retry. ``domain``: the module's own refusal, which
    a retry meets again until the data changes. ``expired``: never ran in time."""
    text = reason or ""
    if text.startswith("expired: "):
        return EXPIRED_KIND
    if text.startswith(_VENDOR_PREFIXES) or " — see logs" in text:
        return VENDOR
    return DOMAIN
