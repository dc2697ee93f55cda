"""What an exception may leave in the ledger and on events.

A domain error keeps its message, scrubbed and truncated. "Domain" is an explicit
marker, never where a class's file lies (an install puts vendor packages next to
ours): a ``TaskReportableError``, or a class a module registered with
``taskrunner.contract.register_domain_error``. Anything else -- driver,
framework, HTTP client -- carries SQL, bound values or tokened URLs in its
message, so only its class name is kept, with a short error reference; the full
exception goes to the log, whose line carries the same reference
(``security.refs``), so an operator finds that entry.

Every text the ledger stores goes through ``bounded`` as the last step, after any
prefix a caller adds: cut to a window, sanitised (``security.sanitise``: no NUL or
other control character, no lone surrogate), scrubbed (the seam: credentials, card
numbers, IBANs, SSNs), cut to ``MAX_LENGTH``. Event payloads and operator action
details go through it leaf by leaf (``stored_payload``).

Redaction is total: whatever an exception holds -- a ``__str__`` that raises, a NUL, a
lone surrogate, a megabyte of text -- ``redact`` returns a text that can be stored, and
``store_reason`` still records the failure, with a fixed reason, when the database
refuses the text it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flask import Flask, current_app, has_app_context

from extensions import db
from security.refs import error_ref
from security.sanitise import sanitised
from taskrunner.types import TaskReportableError
from tasks.interrupts import raise_if_stopping

logger = logging.getLogger(__name__)

MAX_LENGTH = 500
# Longer than any value the scrubber only recognises whole (a card number with its
# separators, an IBAN, an SSN, a URL's user and password): a text cut to its window
# before scrubbing loses up to this much of its unscrubbed end, where such a value may
# have been cut in half.
SCRUB_MARGIN = 128
WINDOW = MAX_LENGTH + 2 * SCRUB_MARGIN
# Stored when the database refuses a failure's reason: the unit still ends failed.
UNSTORABLE = "failed; its reason could not be stored — see logs"
WITHHELD = "[withheld: the scrubber failed — see logs]"
SCRUBBER = "taskrunner.scrubber"
T = TypeVar("T")

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


def bounded(text: str) -> str:
    """``text`` as the ledger stores it: apply it last, after every prefix.

    Only a window of the text is sanitised and scrubbed, so a megabyte costs what a
    short message does; where the window cut the text, the end that the scrubber left
    untouched is dropped (up to ``SCRUB_MARGIN``): a card number or password cut in half
    there was not recognised, and no part of it is kept.
    """
    window = sanitised(text[:WINDOW])
    try:
        stored = scrub(window)
        if len(text) > WINDOW:
            stored = stored[: len(stored) - _untouched_end(window, stored)]
        if len(stored) > MAX_LENGTH:
            stored = _cut(stored)
    except Exception:  # never store what could not be scrubbed, never fail for it either
        logger.exception("The scrubber failed on a text to store; it is withheld")
        return WITHHELD
    return stored


def _cut(scrubbed: str) -> str:
    """``scrubbed`` cut to ``MAX_LENGTH``, scrubbed again: the cut may leave the head of a
    longer value the scrubber rightly passed over (a 20-digit reference cut to a valid
    card's 16)."""
    cut = scrubbed[:MAX_LENGTH]
    for _ in range(3):  # a label cut short scrubs to itself: this settles in a step or two
        again = scrub(cut)[:MAX_LENGTH]
        if again == cut:
            break
        cut = again
    return cut


def _untouched_end(before: str, after: str) -> int:
    """How many of the last ``SCRUB_MARGIN`` characters scrubbing left as they were."""
    same, most = 0, min(len(before), len(after), SCRUB_MARGIN)
    while same < most and before[-1 - same] == after[-1 - same]:
        same += 1
    return same


def stored_payload(value: Any) -> Any:
    """An event payload or an action's detail with every text in it (keys too) ``bounded``."""
    if isinstance(value, str):
        return bounded(value)
    if isinstance(value, Mapping):
        return {bounded(str(key)): stored_payload(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [stored_payload(item) for item in value]
    return value


def redact(exc: BaseException) -> str:
    """The operator-safe reason for ``exc``: always a text, whatever ``exc`` holds."""
    cls = type(exc)
    try:
        if is_domain_error(exc):
            stored = bounded(_message(exc))
            # A blank reason makes an error group that no link and no retry can name.
            return stored if stored.strip() else bounded(cls.__name__)
        return f"unhandled {cls.__module__}.{cls.__qualname__} — see logs, ref {error_ref(exc)}"
    except Exception:
        logger.warning("A reason for %s could not be made", cls.__qualname__, exc_info=True)
        return f"unhandled {sanitised(str(cls.__qualname__))[:200]} — see logs"


def _message(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # a __str__ that raises: the class still says what failed
        return f"{type(exc).__name__} (its message could not be read)"


def store_reason(write: Callable[[str], T], reason: str) -> T:
    """``write(reason)``; if the database refused it, ``write(UNSTORABLE)``.

    A failure is recorded whatever its reason holds: a unit whose reason cannot be
    written still ends failed, never running forever with each retry adding an attempt.
    """
    try:
        return write(reason)
    except Exception as exc:
        raise_if_stopping(exc)
        logger.exception("A failure's reason could not be stored; a fixed reason stands in")
        db.session.rollback()
        return write(UNSTORABLE)
