"""Quoting untrusted input back in an error message: a short, printable prefix only.

A refusal that quotes the whole input turns a 10 MiB body into a 10 MiB answer
(and a log line), and can carry control characters into a terminal.
"""

from __future__ import annotations

MAX_ECHO = 40


def echo(text: str, limit: int = MAX_ECHO) -> str:
    """``repr`` of at most ``limit`` characters of ``text``, marked when cut."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"
