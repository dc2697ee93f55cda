"""The error groups' fold in PostgreSQL's SQL (``fold_sql``, what a migration's backfill and
a benchmark's fill write): its fast path (two plain patterns) gives what the one pattern
with lookarounds gives, which is what Python's ``normalize_reason`` gives (what the ledger
writes with every reason, on both backends)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import String, literal, select

from extensions import db
from taskrunner.ledger.reason_fold import fold_sql, normalize_reason
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "postgres", reason="SQLite folds in Python")

# Reasons built from what the pattern cares about: digits, references, periods, dashes.
pieces = st.sampled_from(
    [
        "ref ",
        "3f9c0a1b",
        "8779e14",
        "2026-11",
        "1999-12",
        "2026-13",
        "20",
        "-",
        "0",
        "7",
        "12345",
        "a",
        "f",
        " ",
        "tenant ",
        "unit ",
        ":",
        "—",
        "é",
    ]
)
reasons = st.lists(pieces, max_size=12).map("".join)


def folded(reason: str) -> str:
    return db.session.execute(select(fold_sql(literal(reason, String)))).scalar_one()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reason=reasons)
@example(reason="ref 123458779e14")
def test_postgresql_folds_every_reason_as_python_does(ctx, reason):
    assert folded(reason) == normalize_reason(reason)
