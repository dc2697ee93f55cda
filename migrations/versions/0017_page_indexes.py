"""pages: a run's live unit counts per status from one partial index

Revision ID: 0017_page_indexes
Revises: 0016_alert_episodes
Create Date: 2026-12-02 12:00:00

"""

from alembic import op
import sqlalchemy as sa


revision = "0017_page_indexes"
down_revision = "0016_alert_episodes"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index(
        "ix_task_run_units_run_live_status",
        "task_run_units",
        ["task_run_id", "status"],
        unique=False,
        postgresql_where=sa.text("deleted_at IS NULL"),
        sqlite_where=sa.text("deleted_at IS NULL"),
    )


def downgrade():
    op.drop_index(
        "ix_task_run_units_run_live_status",
        table_name="task_run_units",
        postgresql_where=sa.text("deleted_at IS NULL"),
        sqlite_where=sa.text("deleted_at IS NULL"),
    )
