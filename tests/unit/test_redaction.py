"""What a failure may leave in the ledger (SPEC §6)."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy.exc import OperationalError

from dlp.masker import iban_valid, luhn_valid, mask
from taskrunner import redaction
from taskrunner.contract import TaskReportableError
from tests.factories import Broken


class ProjectError(Exception):
    """Defined in the project's own modules: a domain error without the marker."""


def test_a_domain_error_keeps_its_message():
    assert redaction.redact(TaskReportableError("tenant 7 has no billing address")) == (
        "tenant 7 has no billing address"
    )


def test_an_exception_class_of_the_project_keeps_its_message():
    assert redaction.redact(ProjectError("quota exceeded")) == "quota exceeded"
    assert redaction.redact(Broken("unit k1 broke")) == "unit k1 broke"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            OperationalError("SELECT secret", {"p": "sk_live_x"}, Exception("boom")),
            "unhandled sqlalchemy.exc.OperationalError — see logs",
        ),
        (
            redis.exceptions.ConnectionError("redis://:pw@host"),
            "unhandled redis.exceptions.ConnectionError — see logs",
        ),
        (ValueError("https://api.example/?token=abc"), "unhandled builtins.ValueError — see logs"),
    ],
)
def test_any_other_exception_keeps_only_its_class_name(exc, expected):
    assert redaction.redact(exc) == expected


def test_a_domain_message_is_truncated_to_500_characters():
    assert len(redaction.redact(TaskReportableError("x" * 2000))) == 500


def test_the_scrubber_seam_passes_through_until_dlp_binds_it(monkeypatch):
    monkeypatch.setattr(redaction, "_scrubber", lambda text: text)
    message = "card 4111 1111 1111 1111 declined"
    assert redaction.redact(TaskReportableError(message)) == message

    redaction.bind_scrubber(mask)
    assert redaction.redact(TaskReportableError(message)) == "card [card ····1111] declined"


def test_the_app_binds_the_dlp_masker(ctx):
    assert redaction.redact(TaskReportableError("ssn 123-45-6789")) == "ssn [ssn]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pay with 4111-1111-1111-1111 now", "pay with [card ····1111] now"),
        ("5500 0000 0000 0004", "[card ····0004]"),
        ("order 4111 1111 1111 1112 shipped", "order 4111 1111 1111 1112 shipped"),  # not Luhn
        ("to DE89 3704 0044 0532 0130 00 please", "to [iban] please"),
        ("GB82WEST12345698765432", "[iban]"),
        ("GB00WEST12345698765432", "GB00WEST12345698765432"),  # bad check digits
        ("ssn 078-05-1120 on file", "ssn [ssn] on file"),
        ("ssn 000-12-3456 invalid", "ssn 000-12-3456 invalid"),
        ("invoice 2026-11-29 #12345", "invoice 2026-11-29 #12345"),
    ],
)
def test_the_masker_masks_only_checksum_valid_values(text, expected):
    assert mask(text) == expected


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE88370400440532013000")
