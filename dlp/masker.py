"""Masks value-shaped secrets in text: card numbers (Luhn), IBANs (mod-97), US SSNs.

Only values that pass their checksum are masked, so order numbers and dates that
merely look long survive. A value is found wherever it sits, never by one greedy
match tried as a whole:

- cards: digits joined by at most two spaces, dashes or dots form a run; every
  window of 13 to 19 digits of a run is Luhn-checked, and every digit inside a
  valid window is masked (``order 10 4111111111111111`` loses the card, not the
  order number);
- IBANs: from every two letters followed by two digits, as many characters as
  that country's IBAN has (spaces or dashes between groups of four allowed, any
  case), mod-97 checked;
- SSNs: ``123-45-6789``, ``123 45 6789`` or ``123456789`` with valid area, group
  and serial, not touching other digits.

A UUID is an identifier, never a secret, and operators search for run uuids in logs
and reasons: one whose groups happen to be all digits would otherwise pass for a
card number, so UUID-shaped text is left as it is.

Bound to the task runner's scrubber seam at app start (``init_app``): dlp depends
on the runner, never the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from taskrunner.contract import bind_scrubber

# ISO 13616 registry: the length of each country's IBAN.
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
    "YE": 30,
}  # fmt: skip

DIGIT_RUN = re.compile(r"\d(?:[ .\-]{0,2}\d)*")
IBAN_START = re.compile(r"(?=[A-Za-z]{2}\d{2})")
SSN = re.compile(r"(?<!\d)(?!000|666|9)\d{3}([ \-]?)(?!00)\d{2}\1(?!0000)\d{4}(?!\d)")
UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}(?![0-9A-Za-z])"
)
CARD_DIGITS = range(13, 20)
# A digit's contribution to a Luhn sum when it is doubled.
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        total += _DOUBLED[int(char)] if index % 2 else int(char)
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    compact = re.sub(r"[ \-]", "", candidate).upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not (
        compact.isascii() and compact.isalnum()
    ):
        return False
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    return int(numeric) % 97 == 1


def _luhn_windows(digits: list[int]) -> list[tuple[int, int]]:
    """(first, end) of every 13-19 digit window whose Luhn sum is 0 mod 10.

    Prefix sums by position parity make each window O(1): in a window ending at
    ``end``, the digits doubled are those whose parity differs from ``end - 1``'s.
    """
    sums = [[[0], [0]], [[0], [0]]]  # sums[doubled][parity]: prefix sums
    for index, digit in enumerate(digits):
        for doubled, value in ((0, digit), (1, _DOUBLED[digit])):
            for parity in (0, 1):
                prefix = sums[doubled][parity]
                prefix.append(prefix[-1] + (value if index % 2 == parity else 0))
    windows = []
    for first in range(len(digits)):
        for size in CARD_DIGITS:
            end = first + size
            if end > len(digits):
                break
            kept, doubled = (end - 1) % 2, end % 2
            total = (sums[0][kept][end] - sums[0][kept][first] + sums[1][doubled][end]) - sums[1][
                doubled
            ][first]
            if total % 10 == 0:
                windows.append((first, end))
    return windows


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Character spans covering every Luhn-valid 13-19 digit window of every digit run."""
    spans = []
    for run in DIGIT_RUN.finditer(text):
        if run.end() - run.start() < CARD_DIGITS.start:
            continue  # fewer characters than a card has digits: most runs, skipped cheaply
        positions = [run.start() + i for i, c in enumerate(run.group()) if c.isdigit()]
        if len(positions) < CARD_DIGITS.start:
            continue
        for first, end in _luhn_windows([int(text[p]) for p in positions]):
            spans.append((positions[first], positions[end - 1] + 1))
    return spans


def _iban_end(text: str, begin: int, length: int) -> int | None:
    """Where an IBAN of ``length`` characters starting at ``begin`` ends, or None.

    A space or dash may stand between groups of four, nowhere else.
    """
    at, count = begin, 0
    while count < length and at < len(text):
        char = text[at]
        if char.isascii() and char.isalnum():
            count += 1
        elif not (char in " -" and count % 4 == 0 and count):
            return None
        at += 1
    return at if count == length else None


def _iban_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for start in IBAN_START.finditer(text):
        begin = start.start()
        length = IBAN_LENGTHS.get(text[begin : begin + 2].upper())
        end = _iban_end(text, begin, length) if length else None
        if end is not None and iban_valid(text[begin:end]):
            spans.append((begin, end))
    return spans


def _masked(text: str, spans: list[tuple[int, int]], label: Callable[[str], str]) -> str:
    """``text`` with each group of overlapping spans replaced by one label."""
    merged: list[list[int]] = []
    for begin, end in sorted(spans):
        if merged and begin < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    out, at = [], 0
    for begin, end in merged:
        out += [text[at:begin], label(text[begin:end])]
        at = end
    out.append(text[at:])
    return "".join(out)


def _card_label(value: str) -> str:
    digits = re.sub(r"\D", "", value)
    return f"[card ····{digits[-4:]}]"


def _mask_values(text: str) -> str:
    text = _masked(text, _iban_spans(text), lambda _value: "[iban]")
    text = _masked(text, _card_spans(text), _card_label)
    return SSN.sub("[ssn]", text)


def mask(text: str) -> str:
    """Mask every checksum-valid card number, IBAN and SSN in ``text``; UUIDs stay."""
    out, at = [], 0
    for uuid in UUID.finditer(text):
        out += [_mask_values(text[at : uuid.start()]), uuid.group()]
        at = uuid.end()
    out.append(_mask_values(text[at:]))
    return "".join(out)


def init_app(_app) -> None:
    bind_scrubber(mask)
