"""schedule slots: how each claimed slot ended, and each schedule's pause and episode

Revision ID: 0015_schedule_slots
Revises: 0014_failure_kinds_stacks
Create Date: 2026-12-02 07:00:00

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0015_schedule_slots"
down_revision = "0014_failure_kinds_stacks"
branch_labels = None
depends_on = None

SLOT_COLUMNS = ("enqueued_at", "finished_at", "outcome", "reason", "run_uuid", "initiator")


def upgrade():
    with op.batch_alter_table("periodic_slots") as batch:
        batch.add_column(sa.Column("enqueued_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("finished_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("outcome", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("run_uuid", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("initiator", sa.String(length=191), nullable=True))
    # Slots claimed before: they ran (a claim was only ever followed by its run).
    op.execute("UPDATE periodic_slots SET outcome = 'ok', finished_at = claimed_at")
    op.create_index(
        "ix_periodic_slots_missed",
        "periodic_slots",
        ["name", "slot"],
        postgresql_where=sa.text("outcome = 'missed'"),
        sqlite_where=sa.text("outcome = 'missed'"),
    )
    op.create_table(
        "schedule_states",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("first_known_at", sa.DateTime(), nullable=False),
        sa.Column("paused_at", sa.DateTime(), nullable=True),
        sa.Column("paused_by", sa.String(length=191), nullable=True),
        sa.Column("missed_from", sa.DateTime(), nullable=True),
        sa.Column("missed_slots", sa.Integer(), nullable=False),
        sa.Column("watched_until", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade():
    op.drop_table("schedule_states")
    op.drop_index("ix_periodic_slots_missed", table_name="periodic_slots")
    with op.batch_alter_table("periodic_slots") as batch:
        for column in SLOT_COLUMNS:
            batch.drop_column(column)
