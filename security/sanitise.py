"""Text fit for any column and any JSON payload, on every database.

PostgreSQL refuses a NUL in text and JSON; no driver can encode a lone surrogate (what
``surrogateescape`` decoding or a broken C extension leaves in a ``str``); other control
characters garble pages, terminals and log lines. A stored text keeps newlines and tabs,
loses every other control character, and has each lone surrogate replaced by U+FFFD:
whatever an exception's message holds, its failure can be written.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def sanitised(text: str) -> str:
    """``text`` without control characters (newline and tab kept), lone surrogates replaced."""
    return encodable(_CONTROL.sub("", text))


def encodable(text: str) -> str:
    """``text`` with each lone surrogate replaced: what a log file can always write."""
    return _SURROGATE.sub(REPLACEMENT, text)
