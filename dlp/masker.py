"""Masks value-shaped secrets in text: card numbers (Luhn), IBANs (mod-97), US SSNs.

Only values that pass their checksum are masked, so order numbers and dates that
merely look long survive. A value is found wherever it sits, never by one greedy
match tried as a whole:

- cards: digits joined by at most two spaces (no-break and thin ones too), tabs, dashes
  or dots form a run of groups;
  a whole run of 13 to 19 digits, or a part of a run that starts and ends at its
  groups' edges and reads as a number of its own, is Luhn-checked and masked if
  valid (``order 10 4111111111111111`` loses the card, not the order number). Digits
  are never taken out of the middle of a longer number: a 28-digit cost-centre code
  stays whole and readable, even where some 16 of its digits happen to pass Luhn;
- IBANs: from every two letters followed by two digits, as many characters as
  that country's IBAN has (spaces or dashes between groups of four allowed, any
  case), mod-97 checked;
- SSNs: ``123-45-6789``, ``123 45 6789`` or ``123456789`` with valid area, group
  and serial, not touching other digits.

A UUID is an identifier, never a secret, and operators search for run uuids in logs
and reasons: one whose groups happen to be all digits would otherwise pass for a
card number, so UUID-shaped text is left as it is. So is a uuid written without its
dashes (32 hex digits standing alone, as every dispatch token and Huey job id is):
nine digits inside one read as an SSN, and a masked job id cannot be found in a log.

Half of the one scrubber (``security.scrub``: credentials, then these values), which
``dlp.setup`` binds to the task runner's scrubber seam at app start: dlp depends on
the runner, never the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Callable

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

# What may stand between a value's groups: a space (a no-break, thin or narrow one too, as
# word processors and banking apps write them), a tab, a dot or a dash.
_GAP = " \u00a0\u2009\u202f\t"
DIGIT_RUN = re.compile(rf"\d(?:[{_GAP}.\-]{{0,2}}\d)*")
IBAN_START = re.compile(r"(?=[A-Za-z]{2}\d{2})")
SSN = re.compile(rf"(?<!\d)(?!000|666|9)\d{{3}}([{_GAP}\-]?)(?!00)\d{{2}}\1(?!0000)\d{{4}}(?!\d)")
UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}(?![0-9A-Za-z])"
    r"|(?<![0-9A-Za-z])[0-9a-fA-F]{32}(?![0-9A-Za-z])"
)
SEPARATOR = re.compile(rf"([{_GAP}.\-]{{1,2}})")
CARD_DIGITS = range(13, 20)
# A digit's contribution to a Luhn sum when it is doubled.
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        total += _DOUBLED[int(char)] if index % 2 else int(char)
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    compact = re.sub(rf"[{_GAP}\-]", "", candidate).upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not (
        compact.isascii() and compact.isalnum()
    ):
        return False
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    return int(numeric) % 97 == 1


def _groups(run: str) -> tuple[list[str], list[str]]:
    """A digit run's groups of digits and the separators between them."""
    parts = SEPARATOR.split(run)
    return parts[0::2], parts[1::2]


def _set_apart(groups: list[str], separators: list[str], first: int, last: int) -> bool:
    """Whether groups ``first..last`` of a run read as a number of their own.

    The whole run always does. A part does when its groups are joined by one separator
    and the run does not go on in the same shape on either side: a neighbour joined by
    that same separator with a group as long as the part's edge group continues it
    (``1234 5678 9012 3456 7890 1234 5678`` is one 28-digit number, not a card inside
    one), while ``order 10 4111 1111 1111 1111`` ends the order number where the card
    begins. A single group of 13 to 19 digits always reads as its own number.
    """
    if first == 0 and last == len(groups) - 1:
        return True
    inside = set(separators[first:last])
    if len(inside) > 1:
        return False
    if not inside:
        return True
    [joint] = inside
    left = (
        first > 0
        and separators[first - 1] == joint
        and len(groups[first - 1]) == len(groups[first])
    )
    right = (
        last < len(groups) - 1
        and separators[last] == joint
        and len(groups[last + 1]) == len(groups[last])
    )
    return not (left or right)


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the Luhn-valid card numbers of every digit run.

    A card number is a whole run of 13 to 19 digits, or a part of a run that starts and
    ends at its groups' edges and reads as a number of its own (``_set_apart``): never
    some digits out of the middle of a longer number, so a long reference stays whole.
    """
    spans = []
    for run in DIGIT_RUN.finditer(text):
        if run.end() - run.start() < CARD_DIGITS.start:
            continue  # fewer characters than a card has digits: most runs, skipped cheaply
        groups, separators = _groups(run.group())
        starts = [run.start()]
        for group, separator in zip(groups, separators, strict=False):
            starts.append(starts[-1] + len(group) + len(separator))
        for first in range(len(groups)):
            digits = ""
            for last in range(first, len(groups)):
                digits += groups[last]
                if len(digits) > CARD_DIGITS.stop - 1:
                    break
                if (
                    len(digits) in CARD_DIGITS
                    and luhn_valid(digits)
                    and _set_apart(groups, separators, first, last)
                ):
                    spans.append((starts[first], starts[last] + len(groups[last])))
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
        elif not ((char in _GAP or char == "-") and count % 4 == 0 and count):
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
    """Mask every checksum-valid card number, IBAN and SSN in ``text``; UUIDs stay,
    with or without their dashes."""
    out, at = [], 0
    for uuid in UUID.finditer(text):
        out += [_mask_values(text[at : uuid.start()]), uuid.group()]
        at = uuid.end()
    out.append(_mask_values(text[at:]))
    return "".join(out)
