"""The partial index of active units keyed by when they were queued

A million pending units made every stale count read all of them: "never started" is
judged on queued_at, which no index held. Running units are few, so the heartbeat
needs no place in the key.

Revision ID: 0018_active_units_queued
Revises: 0017_page_indexes
Create Date: 2026-12-02 12:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = "0018_active_units_queued"
down_revision = "0017_page_indexes"
branch_labels = None
depends_on = None

ACTIVE_UNIT = "status IN ('pending', 'running')"


def _active_index(columns):
    op.drop_index(
        "ix_task_run_units_active",
        table_name="task_run_units",
        postgresql_where=sa.text(ACTIVE_UNIT),
        sqlite_where=sa.text(ACTIVE_UNIT),
    )
    op.create_index(
        "ix_task_run_units_active",
        "task_run_units",
        columns,
        unique=False,
        postgresql_where=sa.text(ACTIVE_UNIT),
        sqlite_where=sa.text(ACTIVE_UNIT),
    )


def upgrade():
    _active_index(["status", "queued_at"])


def downgrade():
    _active_index(["status", "heartbeat_at"])
