"""What the log layer's scrubber removes, and what it leaves for the operator to read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from security.scrub import scrub

TOKEN = "tlk_0123456789ab_s3cr3tS3cr3tS3cr3t-_x"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("token=sk_live_PROBE_SECRET", "sk_live_PROBE_SECRET", "token="),
        ("{'token': 'abc123', 'card': '4111 1111 1111 1111'}", "abc123", "[card ····1111]"),
        ("card 4111111111111111 declined", "4111111111111111", "[card ····1111]"),
        (f"GET /api/v1/x?access_token={TOKEN} HTTP/1.1", TOKEN, "access_token="),
        (f"GET /api/v1/x?t={TOKEN} HTTP/1.1", "s3cr3tS3cr3t", "tlk_0123456789ab_"),
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl", "Bearer "),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "Basic "),
        ("postgresql+psycopg://taskledger:hunter2@db/x", "hunter2", "taskledger:"),
        ('{"password": "hun\\"ter2", "x": 1}', "ter2", '"x": 1'),
        ("Cookie: session=.eJw.abc.def", "eJw", "Cookie: "),
        ("key eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "c2lnbmF0dXJl", "key "),
        ("aws AKIAABCDEFGHIJKLMNOP", "ABCDEFGHIJKLMNOP", "AKIA"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
            "MIIE",
            "[private",
        ),
    ],
)
def test_credentials_and_card_numbers_are_scrubbed(text, secret, kept):
    scrubbed = scrub(text)
    assert secret not in scrubbed
    assert kept in scrubbed


@pytest.mark.parametrize(
    "text",
    [
        "Unit probe-7 of run 5fd43054-a5b1-45a8-b76c-9ec7eca0a0ce failed [ref e56c6d49]",
        "UPDATE vendor_accounts SET token=%(token)s WHERE card=%(card)s",
        "a dispatch token was replaced",
        "Pruned 3 runs, 120 units, 4 queue leftovers",
        "order 1234 5678 shipped",  # not a checksum-valid card
    ],
)
def test_ordinary_lines_are_left_alone(text):
    assert scrub(text) == text


SECRET_SHAPES = [
    "token=sk_live_PROBE_SECRET",
    "password=hunter2&token=abc123",
    '{"password": "hunter2"}',
    "postgresql://u:hunter2@h/db",
    "Authorization: Bearer abcDEF123456",
    "Cookie: session=abc",
    "tlk_0123456789ab_s3cr3tS3cr3t",
    "card 4111 1111 1111 1111",
    "iban DE89 3704 0044 0532 0130 00",
    "ssn 078-05-1120",
    "key eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl",
]


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(
        st.one_of(st.sampled_from(SECRET_SHAPES), st.text(max_size=12)), min_size=1, max_size=6
    ),
    glue=st.sampled_from([" ", ", ", "\n", ": "]),
)
def test_scrubbing_twice_changes_nothing_more(parts, glue):
    # A stored reason is read back and stored again with a prefix ("dispatch failed: …"):
    # a second pass must leave it as the first pass did.
    once = scrub(glue.join(parts))
    assert scrub(once) == once
