"""What kind of failure an exception is, and the frames it may leave in the ledger.

A failure is one of four kinds (SPEC §17, "Triage"), stored with the unit:

- ``domain``: the task's own refusal (a ``TaskReportableError`` or a registered domain
  error); a retry meets it again until the data changes.
- ``vendor``: a driver, network or timeout error, from the declared list below, which a
  package extends with its clients' errors (``register_vendor_error``); often transient.
- ``crash``: any other unhandled exception -- a KeyError, a TypeError, an assertion: a
  bug in the task, which a retry meets again until the code changes.
- ``expired``: the unit never ran before its drain horizon.

The stack is what an operator needs to find the line, and nothing an exception carries:
file (relative to the project or to the library it lies in), line and function of up to
``MAX_FRAMES`` frames, innermost last. No locals, no source text, no message.
"""

from __future__ import annotations

import functools
import http.client
import logging
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from taskrunner.redaction import bounded, is_domain_error, redact

logger = logging.getLogger(__name__)

DOMAIN, VENDOR, CRASH, EXPIRED = "domain", "vendor", "crash", "expired"
KINDS = (DOMAIN, VENDOR, CRASH, EXPIRED)
MAX_FRAMES = 30

# Drivers, sockets and HTTP clients: OSError covers ConnectionError, TimeoutError and the
# ``requests`` exceptions; the others are named because they are not OSErrors.
_vendor_errors: set[type[BaseException]] = {
    OSError,
    http.client.HTTPException,
    OperationalError,
    InterfaceError,
    DisconnectionError,
    PoolTimeout,
}
# Clients the project may run with. Each class counts once its module is imported (none
# of its exceptions exists before): importing them here cost every process's start.
_OPTIONAL_VENDOR_ERRORS = (
    ("redis.exceptions", "ConnectionError"),
    ("redis.exceptions", "TimeoutError"),
    ("httpx", "TransportError"),
    ("httpx", "HTTPStatusError"),
    ("urllib3.exceptions", "HTTPError"),
)


def _vendor_classes() -> tuple[type[BaseException], ...]:
    loaded = (
        getattr(sys.modules.get(module), name, None) for module, name in _OPTIONAL_VENDOR_ERRORS
    )
    return (*_vendor_errors, *filter(None, loaded))


E = TypeVar("E", bound=type[BaseException])


def register_vendor_error(cls: E) -> E:
    """Declare a client's exception class a vendor error (a class decorator, or a call)."""
    _vendor_errors.add(cls)
    return cls


def kind_of(exc: BaseException) -> str:
    """The kind of failure ``exc`` is: the domain marker first, then the vendor list."""
    if is_domain_error(exc):
        return DOMAIN
    if isinstance(exc, _vendor_classes()):
        return VENDOR
    return CRASH


_ROOT = Path(__file__).resolve().parents[1]
# Longest first: the project's own virtualenv lies inside the project.
_LIBRARIES = sorted(
    {
        Path(p).resolve()
        for key in ("purelib", "platlib", "stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(key))
    },
    key=lambda p: len(p.parts),
    reverse=True,
)


@functools.lru_cache(maxsize=1024)
def _where(filename: str) -> tuple[str, bool]:
    """(file relative to the library or the project, whether it is the project's own)."""
    path = Path(filename)
    try:
        path = path.resolve()
    except OSError:
        return path.name, False
    for library in _LIBRARIES:
        if path.is_relative_to(library):
            return path.relative_to(library).as_posix(), False
    if path.is_relative_to(_ROOT):
        return path.relative_to(_ROOT).as_posix(), True
    return path.name, False


def stack_of(exc: BaseException) -> list[dict[str, Any]]:
    """The frames of ``exc``'s traceback, innermost last: file, line, function, own."""
    try:
        # No source lines are read (``lookup_lines``), no locals captured: a failure costs
        # a walk of its frames, not a file read per frame.
        frames = traceback.StackSummary.extract(
            traceback.walk_tb(exc.__traceback__), lookup_lines=False
        )[-MAX_FRAMES:]
        stack = []
        for frame in frames:
            file, own = _where(frame.filename)
            stack.append(
                {
                    "file": bounded(file),
                    "line": frame.lineno,
                    "function": bounded(frame.name),
                    "own": own,
                }
            )
        return stack
    except Exception:  # a stack is a help, never a reason for a failure to go unrecorded
        logger.warning("The frames of a %s could not be read", type(exc).__name__, exc_info=True)
        return []


def innermost_own(stack: list[dict[str, Any]] | None) -> str | None:
    """The innermost frame of the project's own code: "payments/statements.py:88 in generate"."""
    for frame in reversed(stack or []):
        if frame.get("own"):
            return f"{frame.get('file')}:{frame.get('line')} in {frame.get('function')}"
    return None


# Reasons stored before a failure's kind was (and the wedge guard's fixed texts).
_VENDOR_PREFIXES = ("unhandled ", "timeout: ", "dispatch failed: unhandled ")


def reason_kind(reason: str | None) -> str:
    """The kind a stored reason tells, for a unit whose kind was not stored with it."""
    text = reason or ""
    if text.startswith("expired: "):
        return EXPIRED
    if text.startswith(_VENDOR_PREFIXES) or " — see logs" in text:
        return VENDOR
    return DOMAIN


def stored_kind(kind: str | None, reason: str | None) -> str:
    """A unit's failure kind: the one stored with it, else the one its reason tells."""
    return kind if kind in KINDS else reason_kind(reason)


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt as the ledger keeps it: the redacted reason, its kind, its frames."""

    reason: str
    kind: str
    stack: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(redact(exc), kind_of(exc), stack_of(exc))

    @classmethod
    def timeout(cls, reason: str, exc: BaseException | None = None) -> Failure:
        """A timeout is the vendor's (or the job's wait on one); its frames say where."""
        return cls(reason, VENDOR, stack_of(exc) if exc is not None else [])
