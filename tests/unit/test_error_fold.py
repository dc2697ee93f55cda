"""The error groups' folding on PostgreSQL: the fast path (two plain patterns) gives what
the one pattern with lookarounds gives, which is what Python's ``normalize_reason`` gives
(SQLite runs that Python function itself)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import String, literal, select
from sqlalchemy.sql.visitors import replacement_traverse

from extensions import db
from taskrunner.ledger.errors import folded_reason, normalize_reason
from taskrunner.models import TaskRunUnit
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
    """The SQL fold of ``reason``: the unit's column replaced by the text itself."""

    def as_literal(element):
        if getattr(element, "table", None) is TaskRunUnit.__table__ and element.key == "last_error":
            return literal(reason, String)
        return None

    fold = replacement_traverse(folded_reason(db.session), {}, as_literal)
    return db.session.execute(select(fold)).scalar_one()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reason=reasons)
@example(reason="ref 123458779e14")
def test_postgresql_folds_every_reason_as_python_does(ctx, reason):
    assert folded(reason) == normalize_reason(reason)
