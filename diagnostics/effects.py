"""``diagnostics.effects``: a task type whose unit job leaves a side effect to count.

Context: ``{"units": N, "batch": "<id>", "sleep_ms": m}``. Unit i (from 1) sleeps
m ms, then upserts one ``diagnostic_effects`` row keyed by (batch, unit key) and
adds one to its ``executions``. The unique key makes the effect idempotent: a
unit run twice (its worker was killed after the write, before the ledger heard
of it) still leaves one row, and the counter shows how often it really ran.
The chaos harness proves with it that the ledger accounts for every unit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Integer, String, UniqueConstraint, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, mapped_column

from database import is_sqlite, utcnow, write_transaction
from diagnostics.probe import check_counts
from extensions import db
from taskrunner.contract import ContextError, TaskOptions, TaskUnit, UnitJob, check_context

TYPE = "diagnostics.effects"
CONTEXT = {"units": int, "sleep_ms": int, "batch": str}
BATCH_LENGTH = 64


class DiagnosticEffect(db.Model):
    __tablename__ = "diagnostic_effects"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    batch: Mapped[str] = mapped_column(String(BATCH_LENGTH))
    unit_key: Mapped[str] = mapped_column(String(191))
    executions: Mapped[int] = mapped_column(Integer, default=1)
    first_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (UniqueConstraint("batch", "unit_key", name="uq_diagnostic_effects_unit"),)


def record_effect(batch: str, unit_key: str) -> None:
    """Write the unit's effect once; every further execution only counts."""
    now = utcnow()
    dialect = sqlite if is_sqlite(db.session) else postgresql
    stmt = dialect.insert(DiagnosticEffect).values(
        batch=batch, unit_key=unit_key, executions=1, first_at=now, last_at=now
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[DiagnosticEffect.batch, DiagnosticEffect.unit_key],
        set_={"executions": DiagnosticEffect.executions + 1, "last_at": now},
    )
    with write_transaction(db.session):
        db.session.execute(stmt)


def effect_summary(batch: str) -> dict[str, Any]:
    """Rows, distinct units and executions (total and max) of one batch."""
    row = db.session.execute(
        select(
            func.count(),
            func.count(func.distinct(DiagnosticEffect.unit_key)),
            func.coalesce(func.sum(DiagnosticEffect.executions), 0),
            func.coalesce(func.max(DiagnosticEffect.executions), 0),
        ).where(DiagnosticEffect.batch == batch)
    ).one()
    db.session.rollback()
    rows, units, executions, most = (int(v) for v in row)
    return {"rows": rows, "units": units, "executions": executions, "max_executions": most}


class EffectsTask:
    def type(self) -> str:
        return TYPE

    def validate(self, context: Mapping[str, Any]) -> None:
        """Whole numbers of units and milliseconds, none negative; a batch its column holds."""
        check_context(TYPE, context, optional=CONTEXT)
        check_counts(TYPE, context, ("units", "sleep_ms"))
        if len(context.get("batch", "")) > BATCH_LENGTH:
            raise ContextError(f"{TYPE}: the context key 'batch' is over {BATCH_LENGTH} characters")

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, int(context.get("units") or 0) + 1):
            yield TaskUnit(f"effect-{i}")

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        batch = str(context.get("batch") or "")
        sleep_ms = int(context.get("sleep_ms") or 0)

        def effect() -> None:
            if sleep_ms:
                time.sleep(sleep_ms / 1000)
            record_effect(batch, unit.key)

        return effect

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=600)
