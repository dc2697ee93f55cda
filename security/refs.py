"""Error references: the short code that ties a stored reason to its one log entry.

The runner stores ``… — see logs, ref 3f9c0a1b`` for an error whose message it must
not keep; the scrubbing log layer writes the same code on the line of that traceback,
so an operator finds the entry (the way error trackers hand out event ids).
"""

from __future__ import annotations

import secrets

# The code of an error reference ("ref 3f9c0a1b"), in a reason and on a log line.
REF_CODE = r"[0-9a-f]{8}"
_REF_ATTRIBUTE = "_taskledger_error_ref"


def error_ref(exc: BaseException) -> str:
    """The short reference of ``exc``: made on first use, the same ever after."""
    try:
        ref = getattr(exc, _REF_ATTRIBUTE, None)
    except Exception:  # an exception whose attribute access itself fails
        ref = None
    if not isinstance(ref, str):
        ref = secrets.token_hex(4)
        try:
            setattr(exc, _REF_ATTRIBUTE, ref)
        except Exception:  # an exception type that takes no attributes: one ref per call
            pass
    return ref
