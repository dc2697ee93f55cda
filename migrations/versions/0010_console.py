"""console: consumers' presence, paused task types, units settled per minute

Revision ID: 0010_console
Revises: 0009_security
Create Date: 2026-12-01 05:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = "0010_console"
down_revision = "0009_security"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "consumers",
        sa.Column("id", sa.String(length=191), nullable=False),
        sa.Column("host", sa.String(length=191), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("worker_type", sa.String(length=16), nullable=False),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.Column("running", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_consumers_heartbeat_at", "consumers", ["heartbeat_at"])
    op.create_table(
        "task_type_pauses",
        sa.Column("type", sa.String(length=120), nullable=False),
        sa.Column("paused_at", sa.DateTime(), nullable=False),
        sa.Column("paused_by", sa.String(length=191), nullable=False),
        sa.PrimaryKeyConstraint("type"),
    )
    op.create_table(
        "unit_throughput",
        sa.Column("minute", sa.DateTime(), nullable=False),
        sa.Column("type", sa.String(length=120), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("minute", "type"),
    )


def downgrade():
    op.drop_table("unit_throughput")
    op.drop_table("task_type_pauses")
    op.drop_index("ix_consumers_heartbeat_at", table_name="consumers")
    op.drop_table("consumers")
