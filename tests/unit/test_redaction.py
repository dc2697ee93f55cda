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
    from taskrunner.contract import register

    register(LongQueueTask("tests.long_queue"))
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


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE88370400440532013000")
