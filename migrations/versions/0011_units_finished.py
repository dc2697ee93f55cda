"""console: units by finish time (the throughput roll-up and the run list's badges)

Revision ID: 0011_units_finished
Revises: 0010_console
Create Date: 2026-12-01 05:00:00

"""
from alembic import op


revision = "0011_units_finished"
down_revision = "0010_console"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index(
        "ix_task_run_units_finished", "task_run_units", ["finished_at", "status"], unique=False
    )


def downgrade():
    op.drop_index("ix_task_run_units_finished", table_name="task_run_units")
