"""security: scrub the texts stored before the one scrubber applied to them

Until this release the ledger masked card numbers, IBANs and SSNs in what it stored, but
kept credentials (API keys, bearer tokens, passwords in URLs, password=/token= pairs) that
a domain error's message carried, and kept control characters as they came. Every text
stored since goes through the one scrubber and the sanitiser; this pass gives the rows
written before the same treatment, so no page, API or CLI shows what a newer row never
would. Data only: the schema does not change, and there is nothing to undo.

Revision ID: 0012_sec_scrub_stored_texts
Revises: 0011_units_finished
Create Date: 2026-12-02 04:00:00

"""
import sqlalchemy as sa
from alembic import op

from security.sanitise import sanitised
from security.scrub import scrub

revision = "0012_sec_scrub_stored_texts"
down_revision = "0011_units_finished"
branch_labels = None
depends_on = None

BATCH = 1000
# (table, column, holds JSON): every free text the ledger, the course builder and the
# tenant requests store.
STORED_TEXTS = (
    ("task_run_units", "last_error", False),
    ("task_event_deliveries", "last_error", False),
    ("task_events", "payload", True),
    ("operator_actions", "detail", True),
    ("builder_runs", "failure_reason", False),
    ("builder_steps", "error", False),
    ("async_requests", "reason", False),
)


def _clean(value):
    if isinstance(value, str):
        return scrub(sanitised(value))
    if isinstance(value, dict):
        return {_clean(str(key)): _clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value


def upgrade():
    bind = op.get_bind()
    present = set(sa.inspect(bind).get_table_names())
    for name, column, is_json in STORED_TEXTS:
        if name not in present:
            continue
        table = sa.table(name, sa.column("id"), sa.column(column, sa.JSON if is_json else sa.Text))
        stored = table.c[column]
        last = None
        while True:
            query = sa.select(table.c.id, stored).where(stored.is_not(None))
            if last is not None:
                query = query.where(table.c.id > last)
            rows = bind.execute(query.order_by(table.c.id).limit(BATCH)).all()
            if not rows:
                break
            changed = [
                {"row_id": row_id, "cleaned": cleaned}
                for row_id, value in rows
                if (cleaned := _clean(value)) != value
            ]
            if changed:
                bind.execute(
                    table.update()
                    .where(table.c.id == sa.bindparam("row_id"))
                    .values({column: sa.bindparam("cleaned", type_=stored.type)}),
                    changed,
                )
            last = rows[-1][0]


def downgrade():
    pass  # what was scrubbed stays scrubbed
