"""What a failure may leave in the ledger (SPEC §6)."""

from __future__ import annotations

import re

import pytest
import redis
from flask import Flask
from sqlalchemy.exc import OperationalError

from coursebuilder.llm import LLMUnavailable
from dlp.masker import iban_valid, luhn_valid, mask
from security.refs import error_ref
from security.scrub import scrub
from taskrunner import redaction, runner
from taskrunner.contract import TaskOptions, TaskReportableError, register_domain_error
from taskrunner.ledger import ledger
from tenancy.context import NoTenant
from tests.factories import Broken, ControlledTask
from tests.support import see_logs


class UnmarkedError(Exception):
    """Defined in the project's own files, but never declared a domain error."""


@register_domain_error
class DeclaredError(Exception):
    """Declared a domain error through the contract."""


def test_a_domain_error_keeps_its_message():
    assert redaction.redact(TaskReportableError("tenant 7 has no billing address")) == (
        "tenant 7 has no billing address"
    )
    assert redaction.redact(Broken("unit k1 broke")) == "unit k1 broke"


def test_a_declared_domain_error_keeps_its_message_and_so_do_its_subclasses():
    class Narrower(DeclaredError):
        pass

    assert redaction.redact(DeclaredError("quota exceeded")) == "quota exceeded"
    assert redaction.redact(Narrower("quota 2 exceeded")) == "quota 2 exceeded"
    assert redaction.redact(LLMUnavailable("model endpoint busy")) == "model endpoint busy"
    assert redaction.redact(NoTenant("no tenant context")) == "no tenant context"


def test_where_a_class_is_defined_does_not_make_it_a_domain_error():
    # This file lies inside the project: the old rule kept the message and its token.
    reason = redaction.redact(UnmarkedError("GET https://x/?token=sk_live_PROBE_SECRET"))
    assert see_logs(r"tests\.unit\.test_redaction\.UnmarkedError").fullmatch(reason)


@pytest.mark.parametrize(
    ("exc", "class_name"),
    [
        (
            OperationalError("SELECT secret", {"p": "sk_live_x"}, Exception("boom")),
            "sqlalchemy.exc.OperationalError",
        ),
        (redis.exceptions.ConnectionError("redis://:pw@host"), "redis.exceptions.ConnectionError"),
        (ValueError("https://api.example/?token=abc"), "builtins.ValueError"),
    ],
)
def test_any_other_exception_keeps_only_its_class_name_and_an_error_reference(exc, class_name):
    reason = redaction.redact(exc)
    assert see_logs(re.escape(class_name)).fullmatch(reason)
    # The same exception always gives the same reference: the one on its log line.
    assert reason == redaction.redact(exc)
    assert reason.endswith(f"ref {error_ref(exc)}")


def test_every_exception_gets_a_reference_of_its_own():
    refs = {error_ref(ValueError("same message")) for _ in range(200)}
    assert len(refs) == 200


def test_a_domain_message_is_truncated_to_500_characters():
    assert len(redaction.redact(TaskReportableError("x" * 2000))) == 500


class LongQueueTask(ControlledTask):
    """A broken definition: its queue name is long, so the dispatch error's message is."""

    def options(self) -> TaskOptions:
        return TaskOptions(queue="q" * 600, timeout=60)


def test_a_stored_reason_with_a_prefix_is_truncated_last(ctx):
    from taskrunner.registry import registry

    # Past the registration's check, which refuses such a queue: a long message is wanted.
    registry.register(LongQueueTask("tests.long_queue"))
    with pytest.raises(Exception, match="unknown queue"):
        runner.start("tests.long_queue", {"units": 2}, "test")
    run = ledger.runs.runs_page(limit=1).items[0]
    reasons = {u["last_error"] for u in ledger.runs.run_units_page(run).items}
    [reason] = reasons
    assert reason.startswith("dispatch failed: unknown queue 'qqq")
    assert len(reason) == redaction.MAX_LENGTH


def test_the_scrubber_seam_passes_through_until_dlp_binds_it():
    bare = Flask(__name__)  # an app whose modules bound nothing yet
    redaction.init_app(bare)
    message = "card 4111 1111 1111 1111 declined"
    with bare.app_context():
        assert redaction.redact(TaskReportableError(message)) == message

        redaction.bind_scrubber(mask)
        assert redaction.redact(TaskReportableError(message)) == "card [card ····1111] declined"


def test_the_app_binds_the_dlp_masker(ctx):
    assert redaction.redact(TaskReportableError("ssn 123-45-6789")) == "ssn [ssn]"


@pytest.mark.parametrize(
    ("message", "secret", "kept"),
    [
        ("key sk_live_4eC39HqLyjWDarjtT1zdp7dc refused", "4eC39HqLy", "key sk_live_[redacted]"),
        ("sent Authorization: Bearer abcDEF123456ghi", "abcDEF123456ghi", "Bearer [redacted]"),
        ("no route to postgresql://u:hunter2@h/db", "hunter2", "postgresql://u:[redacted]@h/db"),
        ("login password=Tr0ub4dor failed", "Tr0ub4dor", "password=[redacted] failed"),
        ("GET /x?token=t0ken-0123&page=2 refused", "t0ken-0123", "token=[redacted]&page=2"),
        ("card 4111 1111 1111 1111 declined", "4111 1111", "card [card ····1111] declined"),
    ],
)
def test_the_app_scrubs_credentials_and_values_from_a_domain_message(ctx, message, secret, kept):
    """One scrubber for logs and the ledger: credentials as well as card numbers."""
    reason = redaction.redact(TaskReportableError(message))
    assert secret not in reason and kept in reason


def test_a_megabyte_message_is_scrubbed_no_more_than_a_short_one(ctx):
    seen: list[int] = []

    def recording(text: str) -> str:
        seen.append(len(text))
        return scrub(text)

    redaction.bind_scrubber(recording)
    huge = "x" * 1_000_000 + " password=hunter2"
    assert redaction.redact(TaskReportableError(huge)) == "x" * redaction.MAX_LENGTH
    assert seen == [redaction.WINDOW, redaction.MAX_LENGTH]  # the window; what is kept


def test_a_quoted_secret_the_window_cuts_is_stored_in_no_part(ctx):
    # A long refresh token in a vendor's JSON body runs past the window: its quote never
    # closes there. Before, the pair was not recognised and 430 of its characters stayed.
    token = "rt_" + "Ab9-" * 300
    message = f'token exchange failed: {{"token_type": "Bearer", "refresh_token": "{token}"}}'
    reason = redaction.bounded(message)
    assert reason == 'token exchange failed: {"token_type": "Bearer", "refresh_token": "[redacted]"'
    assert "Ab9-" not in reason


def test_what_the_last_cut_keeps_holds_nothing_the_scrubber_would_remove(ctx):
    # A 20-digit reference is no card; cut at the 500th character, its first 16 digits are
    # a valid card number.
    head = "x" * (redaction.MAX_LENGTH - 16 - 1)
    message = f"{head} 41111111111111110000 declined"
    assert len(redaction.bounded(message)) <= redaction.MAX_LENGTH
    assert "4111111111111111" not in redaction.bounded(message)
    assert scrub(redaction.bounded(message)) == redaction.bounded(message)


@pytest.mark.parametrize("cut_at", range(1, 19, 2))
def test_a_card_cut_in_half_where_the_text_is_cut_leaves_no_digit_of_it(ctx, cut_at):
    # The scrubber sees a window of the text: a card straddling its end is no card number
    # there. A long password before it shrinks to "[redacted]", which pulls the window's
    # end into the 500 characters kept: the card's first digits must not be among them.
    card = "4111 1111 1111 1111"
    head = "password=" + "p" * 400 + " words"
    filler = " w" * ((redaction.WINDOW - cut_at - len(head) - 1) // 2)
    message = f"{head}{filler}"[: redaction.WINDOW - cut_at - 1] + f" {card} " + "z" * 900
    assert message.index(card) < redaction.WINDOW < message.index(card) + len(card)

    reason = redaction.bounded(message)

    assert reason.startswith("password=[redacted] words w w")
    assert "4111" not in reason.replace(" ", "") and "411" not in reason[-6:]
    assert len(reason) <= redaction.MAX_LENGTH


class UnreadableError(TaskReportableError):
    def __str__(self) -> str:
        raise RuntimeError("no message today")


class UnreferencedError(Exception):
    """An exception that refuses to be given an attribute, or to be asked for one."""

    def __getattribute__(self, name: str):
        if name.startswith("_taskledger"):
            raise RuntimeError("no attributes here")
        return super().__getattribute__(name)

    def __setattr__(self, name: str, value) -> None:
        raise RuntimeError("no attributes here")


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (UnreadableError("x"), "UnreadableError (its message could not be read)"),
        (TaskReportableError("tenant 7\x00 declined"), "tenant 7 declined"),
        (TaskReportableError("tenant 7 \ud800 declined"), "tenant 7 \ufffd declined"),
        (
            TaskReportableError("bell\x07, escape\x1b[31m, CR\r\nnext\tline"),
            "bell, escape[31m, CR\nnext\tline",
        ),
        (TaskReportableError(""), "TaskReportableError"),
    ],
)
def test_redaction_is_total_and_its_text_can_be_stored(ctx, exc, reason):
    assert redaction.redact(exc) == reason


def test_an_error_that_refuses_attributes_still_gets_a_reason_and_a_reference():
    reason = redaction.redact(UnreferencedError("boom"))
    assert see_logs(r"tests\.unit\.test_redaction\.UnreferencedError").fullmatch(reason)


def test_a_scrubber_that_fails_withholds_the_text_and_never_raises(ctx):
    def broken(text: str) -> str:
        raise RecursionError("a pathological pattern")

    redaction.bind_scrubber(broken)
    assert redaction.redact(TaskReportableError("key sk_live_x")) == redaction.WITHHELD


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE88370400440532013000")
