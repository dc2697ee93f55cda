"""security: operator sessions, known sign-in addresses, rate-limit counters

Revision ID: 0009_security
Revises: 0008_cluster
Create Date: 2026-12-01 10:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = "0009_security"
down_revision = "0008_cluster"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade():
    op.create_table(
        "operator_sessions",
        sa.Column("id", ID, nullable=False),
        sa.Column("user_id", ID, nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_hash"),
    )
    op.create_index("ix_operator_sessions_user_id", "operator_sessions", ["user_id"])
    op.create_index("ix_operator_sessions_expires_at", "operator_sessions", ["expires_at"])
    op.create_table(
        "known_sign_in_addresses",
        sa.Column("id", ID, nullable=False),
        sa.Column("user_id", ID, nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("last_signed_in_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "user_id", "address", name="uq_known_sign_in_addresses_user_address"
        ),
    )
    op.create_index(
        "ix_known_sign_in_addresses_last_signed_in_at",
        "known_sign_in_addresses",
        ["last_signed_in_at"],
    )
    op.create_table(
        "rate_limit_counters",
        sa.Column("id", ID, nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("window_started_at", sa.DateTime(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_index(
        "ix_rate_limit_counters_window_started_at", "rate_limit_counters", ["window_started_at"]
    )


def downgrade():
    op.drop_index("ix_rate_limit_counters_window_started_at", table_name="rate_limit_counters")
    op.drop_table("rate_limit_counters")
    op.drop_index(
        "ix_known_sign_in_addresses_last_signed_in_at", table_name="known_sign_in_addresses"
    )
    op.drop_table("known_sign_in_addresses")
    op.drop_index("ix_operator_sessions_expires_at", table_name="operator_sessions")
    op.drop_index("ix_operator_sessions_user_id", table_name="operator_sessions")
    op.drop_table("operator_sessions")
