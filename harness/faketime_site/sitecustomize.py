"""``time.sleep`` for a process run under Debian's ``faketime`` (the one-clock tests).

libfaketime 0.9.10 cannot shift the wall clock of a Python 3.11 process and keep its
timed waits working: with CLOCK_MONOTONIC faked, ``sem_clockwait`` deadlines are never
reached (every ``Event.wait(timeout)`` hangs); left real
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), ``clock_nanosleep`` on it fails with EINVAL, which
is what ``time.sleep`` calls. The monotonic clock is left real, and ``time.sleep``
waits in ``select``, whose timeout is relative and untouched by libfaketime.
"""

import select
import time


def _sleep(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
