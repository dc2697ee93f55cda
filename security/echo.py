"""Quoting untrusted input back in an error message: a short, printable prefix only.

A refusal that quotes the whole input turns a 10 MiB body into a 10 MiB answer
(and a log line), and can carry control characters into a terminal.
"""

from __future__ import annotations

import re

MAX_ECHO = 40


def echo(text: str, limit: int = MAX_ECHO) -> str:
    """``repr`` of at most ``limit`` characters of ``text``, marked when cut."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


# What would end a terminal line or steer the terminal: C0 and C1 controls, DEL, the
# Unicode line and paragraph separators, the bidirectional overrides (they reorder what
# follows them on screen) and lone surrogates (what ``surrogateescape`` leaves of a
# command line argument that is not UTF-8; no encoding can write them).
_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> bool:
    """Whether ``text`` holds none of those: what a name or a title may be (a lone
    surrogate, which no database stores, among what it may not)."""
    return _UNPRINTABLE.search(text) is None


def error_line(message: str) -> str:
    """The one line every entry point refuses with: ``error:`` and ``message`` on one line."""
    return f"error: {one_line(message)}"


def one_line(text: str) -> str:
    """``text`` with each character that would break or steer a terminal line shown
    escaped, the way ``repr`` shows it (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
