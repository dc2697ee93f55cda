"""Masks value-shaped secrets in text: card numbers (Luhn), IBANs (mod-97), US SSNs.

Only values that pass their checksum are masked, so order numbers and dates
that merely look long survive. Bound to the task runner's scrubber seam at app
start (``init_app``): dlp depends on the runner, never the reverse.
"""

from __future__ import annotations

import re

from taskrunner.contract import bind_scrubber

CARD = re.compile(r"(?<![\d])(?:\d[ -]?){12,18}\d(?![\d])")
IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}\b")
SSN = re.compile(r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)")


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    return int(numeric) % 97 == 1


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    if 13 <= len(digits) <= 19 and luhn_valid(digits):
        return f"[card ····{digits[-4:]}]"
    return match.group()


def _mask_iban(match: re.Match[str]) -> str:
    return "[iban]" if iban_valid(match.group()) else match.group()


def mask(text: str) -> str:
    """Mask every checksum-valid card number, IBAN and SSN in ``text``."""
    text = IBAN.sub(_mask_iban, text)
    text = CARD.sub(_mask_card, text)
    return SSN.sub("[ssn]", text)


def init_app(_app) -> None:
    bind_scrubber(mask)
