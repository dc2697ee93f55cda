"""The scrubbing log layer: every process logs through ``configure_logging``.

What it does, once per process (calling it again changes nothing):

- It installs a log-record factory. Every record -- from our modules, Huey's
  consumer, gunicorn's access log, werkzeug, SQLAlchemy, Alembic -- is built by
  it, with its message formatted and its traceback rendered at once, both
  scrubbed (``security.scrub``: credential shapes, then the DLP masker). A
  record is built once and shared by every handler, so this one hook covers the
  handlers we do not own (``huey_consumer``'s on the ``huey`` logger, gunicorn's)
  as well as ours; a formatter or a filter would have to be attached to each of
  them. The raw exception is dropped from the record: no later formatter can
  render it again unscrubbed.
- A record that carries an exception gets that exception's error reference on
  its message line (``… failed [ref 3f9c0a1b]``): the same reference that
  ``taskrunner.redaction.redact`` puts in "see logs, ref 3f9c0a1b", whichever
  of the two asks first, so an operator finds the one log entry of a failure.
- It adds one handler to the root logger, only when no handler is configured
  there yet: a file (created 0600) or stderr (``-``).
- An uncaught exception goes through the same layer instead of Python's raw
  traceback on stderr, with one line on stderr pointing at the log.

Where it is called: at every entry point, never by the app factory
(``startup``). The consumer entry module (``tasks.consumer``, so every consumer,
its worker processes and the periodic tasks) calls it before it builds the app;
the web entry module (``wsgi``: gunicorn, ``flask --app wsgi run``) and every
``flask`` command of the app (``startup.EntryCommands``) call it through
``startup.prepare_process``. A second call finds the layer installed and root
handlers present and does nothing more.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from security.files import private_file, private_log
from security.refs import error_ref
from security.sanitise import encodable
from security.scrub import scrub

FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"
_render = logging.Formatter()
_installed = False


def configure_logging(
    target: str | None = None, level: str | int = "INFO", instance_log: bool = False
) -> None:
    """Route this process's logging through the scrubbing layer.

    ``target`` is a file path, or ``-`` / empty for stderr; it and ``level`` apply
    only when the root logger has no handler yet. A file a setting names must be empty
    or a log already (``private_log``); the instance's own (``instance_log``) is ours
    whatever it holds.
    """
    global _installed
    if not _installed:
        logging.setLogRecordFactory(_scrubbing_factory(logging.getLogRecordFactory()))
        if sys.excepthook is sys.__excepthook__:
            sys.excepthook = _log_uncaught
        _installed = True
    root = logging.getLogger()
    if root.handlers:
        return
    if not target or target == "-":
        handler: logging.Handler = logging.StreamHandler()
    else:
        path = private_file(Path(target)) if instance_log else private_log(Path(target))
        handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)


def scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    """Format, reference and scrub ``record`` in place (and make it encodable: a lone
    surrogate in an exception's message would otherwise lose the whole line)."""
    try:
        message = record.getMessage()
    except Exception:  # arguments that do not fit the message: keep both, scrubbed
        message = f"{record.msg!r} % {record.args!r}"
    if record.exc_info and record.exc_info[1] is not None:
        message = f"{message} [ref {error_ref(record.exc_info[1])}]"
        record.exc_text = encodable(scrub(_render.formatException(record.exc_info)))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = encodable(scrub(record.exc_text))
    record.msg, record.args = encodable(scrub(message)), ()
    if record.stack_info:
        record.stack_info = encodable(scrub(record.stack_info))
    return record


def _scrubbing_factory(base: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return scrub_record(base(*args, **kwargs))

    return factory


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("taskledger").critical("Uncaught exception", exc_info=(exc_type, exc, tb))
    sys.stderr.write(
        f"error: unexpected {exc_type.__module__}.{exc_type.__qualname__}"
        f" — see logs, ref {error_ref(exc)}\n"
    )
