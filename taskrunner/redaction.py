"""What an exception may leave in the ledger and on events.

A domain error (a ``TaskReportableError``, or any exception class defined in the
project's own modules) keeps its message, scrubbed and truncated. Anything else
-- driver, framework, HTTP client -- carries SQL, bound values or tokened URLs in
its message, so only its class name is kept; the full exception goes to the log.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from taskrunner.contract import TaskReportableError

MAX_LENGTH = 500
PROJECT_ROOT = Path(__file__).resolve().parent.parent

_scrubber: Callable[[str], str] = lambda text: text  # noqa: E731 - pass-through by default


def bind_scrubber(scrubber: Callable[[str], str]) -> None:
    global _scrubber
    _scrubber = scrubber


def scrub(text: str) -> str:
    return _scrubber(text)


def _defined_in_project(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    if not filename:
        return False
    path = Path(filename).resolve()
    if not path.is_relative_to(PROJECT_ROOT):
        return False
    relative = path.relative_to(PROJECT_ROOT).parts
    return not relative or relative[0] not in {".venv", "venv", "site-packages"}


def is_domain_error(exc: BaseException) -> bool:
    return isinstance(exc, TaskReportableError) or _defined_in_project(type(exc))


def redact(exc: BaseException) -> str:
    """The operator-safe reason for ``exc``."""
    if is_domain_error(exc):
        message = str(exc) or type(exc).__name__
        return scrub(message)[:MAX_LENGTH]
    cls = type(exc)
    return f"unhandled {cls.__module__}.{cls.__qualname__} — see logs"
