"""triage: a failure's kind and redacted stack on its unit; a consumer's worker deaths

Revision ID: 0014_failure_kinds_stacks
Revises: 0013_live_streams
Create Date: 2026-12-02 07:00:00

"""
import sqlalchemy as sa
from alembic import op


revision = "0014_failure_kinds_stacks"
down_revision = "0013_live_streams"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("task_run_units") as batch:
        batch.add_column(sa.Column("failure_kind", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("stack", sa.JSON(), nullable=True))
    with op.batch_alter_table("consumers") as batch:
        batch.add_column(sa.Column("worker_deaths", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("deaths", sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table("consumers") as batch:
        batch.drop_column("deaths")
        batch.drop_column("worker_deaths")
    # SQLite drops an unindexed column in place (3.35+): a batch rebuild of the table
    # would lose its AUTOINCREMENT key (not reflected), and ids would be reused after it.
    op.execute("ALTER TABLE task_run_units DROP COLUMN stack")
    op.execute("ALTER TABLE task_run_units DROP COLUMN failure_kind")
