"""Identifiers that vary from one failure to the next fold like numbers in an error group.

A vendor's request id (a UUID), a pointer (``0xdeadbeef``) or a digest differs on every
unit: unfolded, ten thousand units failing alike were ten thousand groups. A word made
of the letters a to f alone ("face", "decade", "deadbeef") is kept.
"""

from __future__ import annotations

import uuid

import pytest

from taskrunner.ledger import ledger
from taskrunner.ledger.reason_fold import normalize_reason
from tests.web.backoffice_support import finished_run


@pytest.mark.parametrize(
    ("reason", "fold"),
    [
        (
            "vendor error, request id 3f2a9c1e-0b7d-4e21-9a3c-5d6e7f809a1b",
            "vendor error, request id #",
        ),
        ("request 3F2A9C1E-0B7D-4E21-9A3C-5D6E7F809A1B refused", "request # refused"),
        ("segfault at 0xdeadbeef", "segfault at #"),
        ("segfault at 0XDEADBEEF", "segfault at #"),
        (
            "digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "digest sha#:#",
        ),
        ("object 5e8ff9bf55ba3508199d22e984129be6 missing", "object # missing"),
        ("commit 1a2b3c4d5e not found", "commit # not found"),
        ("see logs, ref 3f9c0a1b", "see logs, ref #"),
        ("see logs, ref abcdefab", "see logs, ref #"),
        ("token abcdefabcdefabcdef rejected", "token # rejected"),
        ("job_3f2a9c1e77 failed", "job_# failed"),
        # Words of hex letters alone, short tokens and periods stay as they are.
        ("face added to decade", "face added to decade"),
        ("deadbeef cafebabe", "deadbeef cafebabe"),
        ("timeout after 31s", "timeout after #s"),
        ("step 3a of 12 failed", "step #a of # failed"),
        ("no statement for 2026-11", "no statement for 2026-11"),
        ("ed25519 key refused", "ed# key refused"),
        ("café 1a2b3c4d5e", "café #"),
    ],
)
def test_identifiers_fold_and_words_stay(reason, fold):
    assert normalize_reason(reason) == fold


def test_units_failing_with_different_request_ids_make_one_group(ctx):
    keys = [f"u{i}" for i in range(40)]
    failing = {key: f"vendor error, request id {uuid.uuid4()}" for key in keys}
    failing["u0"] = "segfault at 0x7f3a9c1e"
    failing["u1"] = "segfault at 0xdeadbeef"
    run_uuid = finished_run("tests.ids", keys, failing)

    groups = ledger.errors.error_groups(ledger.runs.get_run(run_uuid))

    assert {g.reason: g.count for g in groups} == {
        "vendor error, request id #": 38,
        "segfault at #": 2,
    }
