"""A consumer's stop signal, told apart from whatever a job raised.

Huey's process workers answer SIGTERM with a ``KeyboardInterrupt`` raised by the
signal handler Huey installs in each worker (``huey.consumer``), so the innermost
frame of that exception's traceback is the handler's. Such an interrupt must reach
Huey, which fires ``SIGNAL_INTERRUPTED`` and lets the work be handed back. A library
cleaning up after the interrupt can raise an error of its own in its place
(SQLAlchemy's pool, resetting a connection the interrupt left mid-statement, raises
``ProgrammingError``): the stop is then found behind that error, in its cause or
context. A library may also re-raise the interrupt with its traceback cut off
(psycopg raises ``ex.with_traceback(None)``, so an interrupt that lands in a
statement no longer shows the handler's frame): every worker therefore notes the
stop signal itself, before the handler runs (``huey_internals.watch_stop_signal``),
and an interrupt in a process that received it is the stop whatever its traceback --
provided the worker's consumer is stopping (``huey_internals.consumer_stopping``): a
SIGTERM its consumer did not send (a job signalling its own process) would otherwise be
handed back, run again and signal again, tens of thousands of times a minute.
Any other ``BaseException`` -- a job calling ``sys.exit()``, or raising
``KeyboardInterrupt`` itself -- is that job's failure: handing it back would run it
again, forever.
"""

from __future__ import annotations

from tasks.huey_internals import STOP_HANDLER_MODULES, consumer_stopping, stop_signal_received

STRAY_SIGNAL_REASON = "stopped by a SIGTERM not sent by its consumer; not handed back"


def _raised_by_stop_handler(exc: KeyboardInterrupt) -> bool:
    trace = exc.__traceback__
    if trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    return trace.tb_frame.f_globals.get("__name__") in STOP_HANDLER_MODULES


def _signalled(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt) and (
        stop_signal_received() or _raised_by_stop_handler(exc)
    )


def consumer_stop(exc: BaseException) -> KeyboardInterrupt | None:
    """The consumer's stop signal: ``exc`` itself, or found behind it; else None."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if _signalled(current):
            return current if consumer_stopping() else None
        pending += [current.__cause__, current.__context__]
    return None


def stray_signal(exc: BaseException) -> bool:
    """Whether ``exc``, found no stop, is a SIGTERM's interrupt all the same (its reason
    is then ``STRAY_SIGNAL_REASON``)."""
    return _signalled(exc)


def raise_if_stopping(exc: BaseException) -> None:
    """Let a consumer's stop go on to Huey, which hands the work back; else return."""
    stop = consumer_stop(exc)
    if stop is exc:
        raise exc
    if stop is not None:
        raise KeyboardInterrupt from exc
