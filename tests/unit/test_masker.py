"""The DLP masker: every checksum-valid card number, IBAN and SSN goes, wherever it sits.

The examples are the shapes that slipped through a greedy, whole-match masker; the
properties embed generated valid values in generated text.
"""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlp.masker import IBAN_LENGTHS, iban_valid, luhn_valid, mask

PROPERTY = settings(max_examples=150, deadline=None)


@pytest.mark.parametrize(
    "text",
    [
        "order 10 4111111111111111",
        "ref 12 4111-1111-1111-1111",
        "card 4111.1111.1111.1111 declined",
        "card 4111  1111  1111  1111 declined",
        "pay with 4111-1111-1111-1111 now",
        "5500 0000 0000 0004",
    ],
)
def test_a_valid_card_number_next_to_other_text_is_masked(text):
    masked = mask(text)
    assert "[card ····" in masked
    assert not survives("4111111111111111", masked) and not survives("5500000000000004", masked)


@pytest.mark.parametrize(
    "text",
    [
        "IBAN DE89 3704 0044 0532 0130 00 REJECTED BY BANK",
        "iban de89 3704 0044 0532 0130 00 rejected by bank",
        "to DE89370400440532013000, please",
        "GB82WEST12345698765432",
        "gb82 west 1234 5698 7654 32 returned",
    ],
)
def test_a_valid_iban_is_masked_in_any_case_and_next_to_words(text):
    masked = mask(text)
    assert "[iban]" in masked
    assert "REJECTED BY BANK" in masked.upper() or "IBAN" not in text


@pytest.mark.parametrize(
    "text", ["ssn 078-05-1120 on file", "ssn 078051120 on file", "ssn 078 05 1120 on file"]
)
def test_an_ssn_with_or_without_dashes_is_masked(text):
    assert mask(text) == "ssn [ssn] on file"


@pytest.mark.parametrize(
    "text",
    [
        "ssn 000-12-3456 invalid",  # area 000 is never issued
        "invoice 2026-11-29 #12345",
        "probe unit 7 failed",
        "tenant 4 has no billing address for 2026-10",
        "GB00 WEST 1234 5698 7654",  # not an IBAN's length
        "call 555-123-4567",
    ],
)
def test_what_is_not_a_valid_value_is_left_alone(text):
    assert mask(text) == text


@pytest.mark.parametrize(
    "code",
    [
        "0000000000000000000000000001",  # zeros pass Luhn in every window
        "4111111111111111000000000000",  # a card's digits glued to a longer number
        "1234 5678 9012 3456 7890 1234 5678",
        "0000-0000-0000-0000-0000-0000-0001",
    ],
)
def test_a_28_digit_cost_centre_code_stays_readable(code):
    text = f"cost centre {code} over budget"
    assert mask(text) == text


def test_a_card_set_apart_from_a_longer_number_is_still_masked():
    assert mask("order 1234 5678 4111-1111-1111-1111") == "order 1234 5678 [card ····1111]"
    assert mask("order 10 4111 1111 1111 1111 ok") == "order 10 [card ····1111] ok"


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE88370400440532013000")
    assert iban_valid("de89 3704 0044 0532 0130 00")


# -- properties ----------------------------------------------------------------------------


def survives(value: str, text: str) -> bool:
    """Whether ``value`` (digits, or an IBAN) can still be read in ``text``.

    Separators a writer might put inside a number are removed first, and case is ignored.
    """
    joined = re.sub(r"(?<=[0-9A-Za-z])(?:[ .\-]{1,2})(?=[0-9A-Za-z])", "", text)
    return value.upper() in joined.upper()


def luhn_complete(body: str) -> str:
    for check in "0123456789":
        if luhn_valid(body + check):
            return body + check
    raise AssertionError("unreachable")


@st.composite
def card_numbers(draw) -> str:
    length = draw(st.integers(13, 19))
    body = draw(st.text("0123456789", min_size=length - 1, max_size=length - 1))
    return luhn_complete(draw(st.sampled_from("3456")) + body[1:])


@st.composite
def ibans(draw) -> str:
    country = draw(st.sampled_from(sorted(IBAN_LENGTHS)))
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    bban = draw(st.text(alphabet, min_size=IBAN_LENGTHS[country] - 4, max_size=34))
    bban = bban[: IBAN_LENGTHS[country] - 4]
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{bban}"


@st.composite
def ssns(draw) -> str:
    area = draw(st.integers(1, 899).filter(lambda n: n != 666))
    return f"{area:03d}{draw(st.integers(1, 99)):02d}{draw(st.integers(1, 9999)):04d}"


def grouped(value: str, size: int, separator: str) -> str:
    return separator.join(value[i : i + size] for i in range(0, len(value), size))


words = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ:#/", min_size=1, max_size=9)
short_numbers = st.integers(0, 99_999_999).map(str)
# Prose around a value: words and short numbers, never two numbers in a row.
prose = st.lists(st.one_of(words, st.tuples(words, short_numbers).map(" ".join)), max_size=4).map(
    " ".join
)


@PROPERTY
@given(
    pan=card_numbers(),
    size=st.sampled_from([0, 4, 3, 5]),
    separator=st.sampled_from([" ", "-", ".", "  "]),
    before=prose,
    after=prose,
    glue=st.sampled_from([" ", " 10 ", " ref 12 ", ": "]),
)
def test_no_generated_card_number_survives_in_generated_text(
    pan, size, separator, before, after, glue
):
    # "card" sets the number apart from a number the prose may end with: digits joined to
    # another number in the same shape are one longer number, which no card hides in.
    shown = grouped(pan, size, separator) if size else pan
    masked = mask(f"{before} card{glue}{shown} {after}")
    assert not survives(pan, masked), masked


@PROPERTY
@given(
    iban=ibans(),
    spaced=st.booleans(),
    lower=st.booleans(),
    before=prose,
    after=st.sampled_from(["", " REJECTED BY BANK", " rejected", ", thanks", " 12 items"]),
)
def test_no_generated_iban_survives_in_generated_text(iban, spaced, lower, before, after):
    shown = grouped(iban, 4, " ") if spaced else iban
    masked = mask(f"{before} {shown.lower() if lower else shown}{after}")
    assert not survives(iban, masked), masked


@PROPERTY
@given(ssn=ssns(), separator=st.sampled_from(["-", " ", ""]), before=prose, after=prose)
def test_no_generated_ssn_survives_in_generated_text(ssn, separator, before, after):
    shown = f"{ssn[:3]}{separator}{ssn[3:5]}{separator}{ssn[5:]}"
    masked = mask(f"{before} ssn {shown} {after}")
    assert not survives(ssn, masked), masked


@PROPERTY
@given(text=prose)
def test_text_without_card_iban_or_ssn_shaped_numbers_is_left_alone(text):
    # Words and numbers of at most 8 digits, never two numbers in a row: nothing to mask.
    assert mask(text) == text


def completes_a_card(digits: str) -> bool:
    """Whether some 13-19 digit window ending at the last digit passes Luhn."""
    return any(luhn_valid(digits[-size:]) for size in range(13, 20) if len(digits) >= size)


@st.composite
def luhn_free_runs(draw) -> str:
    """A run of 13-30 digits with no Luhn-valid 13-19 digit window anywhere.

    Built digit by digit: each window ending at a digit rules out exactly one value of it
    (its check digit), so at most seven of ten are ruled out and three always remain.
    """
    digits = ""
    for _ in range(draw(st.integers(13, 30))):
        allowed = [d for d in "0123456789" if not completes_a_card(digits + d)]
        digits += draw(st.sampled_from(allowed))
    return digits


@PROPERTY
@given(
    run=luhn_free_runs(),
    size=st.sampled_from([0, 4]),
    separator=st.sampled_from([" ", "-", ".", "  "]),
    before=prose,
    after=prose,
)
def test_a_long_digit_run_that_fails_luhn_in_every_window_is_left_alone(
    run, size, separator, before, after
):
    # Order numbers, tracking codes, references: long, but no window is a card number.
    shown = grouped(run, size, separator) if size else run
    text = f"{before} order {shown} {after}"
    assert mask(text) == text


@PROPERTY
@given(
    digits=st.text("0123456789", min_size=20, max_size=40),
    size=st.sampled_from([0, 4, 5]),
    separator=st.sampled_from([" ", "-", ".", "  "]),
    before=prose,
    after=prose,
)
def test_a_number_longer_than_any_card_is_never_partly_masked(
    digits, size, separator, before, after
):
    # A reference, a cost centre, a tracking code: 20 digits or more, in one piece or in
    # equal groups. Some 13-19 digits of it pass Luhn more often than not; it is no card.
    shown = grouped(digits, size, separator) if size else digits
    if size and len(digits) % size:
        shown = grouped(digits[: len(digits) - len(digits) % size], size, separator)
    text = f"{before} code {shown} {after}"
    assert mask(text) == text


@PROPERTY
@given(value=st.integers(0, 2**128 - 1), upper=st.booleans(), before=prose, after=prose)
def test_a_uuid_is_never_taken_for_a_card_or_an_ssn(value, upper, before, after):
    # An all-digit uuid (00000000-0000-4000-8000-000000000000) passes Luhn as a "card".
    shown = str(uuid.UUID(int=value))
    shown = shown.upper() if upper else shown
    text = f"{before} run {shown} {after}"
    assert mask(text) == mask(f"{before} run ") + shown + mask(f" {after}")


def test_a_card_next_to_a_uuid_is_still_masked():
    text = "run 00000000-0000-4000-8000-000000000000 card 4111 1111 1111 1111"
    assert mask(text) == "run 00000000-0000-4000-8000-000000000000 card [card ····1111]"


@st.composite
def tokens(draw) -> str:
    """32 hex digits, as uuid4().hex: random, or with an SSN or a card's digits inside
    (``e289d123456789b796…``), which a random draw almost never holds."""
    token = uuid.UUID(int=draw(st.integers(0, 2**128 - 1))).hex
    inside = draw(st.one_of(st.just(""), ssns(), card_numbers()))
    at = draw(st.integers(0, 32 - len(inside)))
    return token[:at] + inside + token[at + len(inside) :]


@PROPERTY
@given(token=tokens(), upper=st.booleans(), unit=st.integers(1, 10**9), before=prose, after=prose)
def test_a_dispatch_token_or_job_id_is_never_masked(token, upper, unit, before, after):
    # A token is uuid4().hex and a job id ``u<unit>.<token>``: a log line whose job id
    # was masked cannot be found by it.
    token = token.upper() if upper else token
    job = f"u{unit}.{token}"
    text = f"{before} run_unit: {job} {after}"
    assert mask(text) == mask(f"{before} run_unit: u{unit}.") + token + mask(f" {after}")


@PROPERTY
@given(
    token=tokens(),
    pan=card_numbers(),
    ssn=ssns(),
    glue=st.sampled_from([" ", ".", ": ", "/", "-"]),
)
def test_a_card_or_ssn_next_to_a_token_is_still_masked(token, pan, ssn, glue):
    masked = mask(f"job u7.{token}{glue}card {pan} ssn {ssn}{glue}{token}")
    assert masked.count(token) == 2
    # The token may hold the same digits: only what stands outside it must be gone.
    outside = masked.replace(token, " ")
    assert not survives(pan, outside) and not survives(ssn, outside), masked


@pytest.mark.parametrize("length", [31, 33, 40])
def test_only_a_whole_32_hex_digit_token_is_exempt(length):
    # 123456789 is a valid SSN; inside hex that is no token, it is masked as before.
    text = f"ref {('ab123456789cd' + 'e' * 40)[:length]} end"
    assert "[ssn]" in mask(text)
