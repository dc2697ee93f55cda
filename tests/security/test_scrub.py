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
        # A secret's name with a prefix, as settings and vendors spell them.
        ("SMTP_PASSWORD=Smtp-S3cret", "Smtp-S3cret", "SMTP_PASSWORD=[redacted]"),
        ("GET /v1/x?api_token=ApiTok-S3cret HTTP/1.1", "ApiTok-S3cret", " HTTP/1.1"),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI", "key=[redacted]"),
        ("LLM_API_KEY=sk-abc123xyz", "abc123xyz", "LLM_API_KEY=[redacted]"),
        ("x-auth-token: zzTopSecret", "zzTopSecret", "x-auth-token: [redacted]"),
        ('{"aws_secret_access_key": "wJalrXUtnFEMI"}', "wJalrXUtnFEMI", '"[redacted]"}'),
        ("{'db_password': 'Db-S3cret'}", "Db-S3cret", "'db_password': '[redacted]'"),
        ("headers={'X-Api-Key': 'HdrKey123456'}", "HdrKey123456", "'X-Api-Key': '[redacted]'"),
        ("{'Authorization': 'Token abcdef123456'}", "abcdef123456", "'[redacted]'"),
        # A value runs to its closing quote, or past punctuation when it is not quoted.
        ("host=db password='correct horse-S3cret'", "horse-S3cret", "password='[redacted]'"),
        ("password=Xy7)kP9]qR2 then", "kP9]qR2", "password=[redacted] then"),
        ("client_secret=ab,cdEF12", "cdEF12", "client_secret=[redacted]"),
        # A body cut before its quote closed.
        ('body {"client_secret": "cs_Unterminated', "cs_Unterminated", '"[redacted]"'),
        # Schemes other than bearer and basic; a header without a scheme.
        ("Authorization: Token 9944b09199c62bcf", "9944b0919", "Token [redacted]"),
        ("Proxy-Authorization: raw-S3cret now", "raw-S3cret", "Authorization: [redacted] now"),
        # A password in a URL holding "/" or "@" unescaped.
        ("postgresql://u:Ab/Cd+Ef9@db/x", "Cd+Ef9", "u:[redacted]@db/x"),
        ("https://user:p@ss-S3cret@host/x", "ss-S3cret", "user:[redacted]@host/x"),
        # A URL-encoded pair, a PGP key.
        ("next=https%3A%2F%2Fa%2Fcb%3Ftoken%3DEncTok123%26x", "EncTok123", "%3D[redacted]%26x"),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBFP\n-----END PGP PRIVATE KEY BLOCK-----",
            "lQOYBFP",
            "[private key [redacted]]",
        ),
        # Cards grouped with no-break, thin or narrow spaces, or tabs.
        ("card 4111\u00a01111\u00a01111\u00a01111", "1111\u00a01111", "[card ····1111]"),
        ("card 4111\u202f1111\u202f1111\u202f1111", "1111\u202f1111", "[card ····1111]"),
        ("card 4111\u20091111\u20091111\u20091111", "1111\u20091111", "[card ····1111]"),
        ("card 4111\t1111\t1111\t1111", "1111\t1111", "[card ····1111]"),
        ("iban DE89\u00a03704\u00a00044\u00a00532\u00a00130\u00a000", "3704", "[iban]"),
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
        "used max_tokens=500, total_tokens: 12, token_type=bearer",
        "fetch https://registry.npmjs.org:443/@types/node failed",
        "GET http://host:8080/path?x=a@example.com",
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
    "SMTP_PASSWORD=Smtp-S3cret",
    "db_password='correct horse'",
    "Authorization: Token 9944b09199c62bcf",
    "Authorization: raw-S3cret",
    '{"client_secret": "cs_Unterminated',
    "postgresql://u:Ab/Cd@ef@db/x",
    "a%3Ftoken%3DEncTok123",
    "card 4111\u00a01111\u00a01111\u00a01111",
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
