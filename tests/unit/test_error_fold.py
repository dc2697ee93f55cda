"""The error groups' fold in PostgreSQL's SQL (``fold_sql``, what a migration's backfill and
a benchmark's fill write): its fast paths (plain patterns where no identifier or lookaround
can match) give what the patterns with lookarounds give, which is what Python's
``normalize_reason`` gives (what the ledger writes with every reason, on both backends)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import String, literal, select

from extensions import db
from taskrunner.ledger.reason_fold import fold_sql, normalize_reason
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "postgres", reason="SQLite folds in Python")

# Reasons built from what the patterns care about: digits, references, periods, dashes,
# hex identifiers.
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
        "0x",
        "3f2a9c1e-0b7d-4e21-9a3c-5d6e7f809a1b",
        "deadbeef",
        "B",
        "_",
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
@example(reason="id 3f2a9c1e-0b7d-4e21-9a3c-5d6e7f809a1bdeadbeef at 0xdeadbeef_7")
def test_postgresql_folds_every_reason_as_python_does(ctx, reason):
    assert folded(reason) == normalize_reason(reason)
