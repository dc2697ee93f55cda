"""Alert episodes, their messages and deliveries, and mutes

Revision ID: 0016_alert_episodes
Revises: 0015_schedule_slots
Create Date: 2026-12-02 07:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = "0016_alert_episodes"
down_revision = "0015_schedule_slots"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "alert_episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=191), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("last_true_at", sa.DateTime(), nullable=False),
        sa.Column("opened_at", sa.DateTime(), nullable=True),
        sa.Column("last_sent_at", sa.DateTime(), nullable=True),
        sa.Column("resolved_at", sa.DateTime(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
    )
    op.create_index(
        "ux_alert_episodes_active",
        "alert_episodes",
        ["rule", "key"],
        unique=True,
        postgresql_where=sa.text("state <> 'resolved'"),
        sqlite_where=sa.text("state <> 'resolved'"),
    )
    op.create_index("ix_alert_episodes_first_seen", "alert_episodes", ["first_seen_at"])
    op.create_table(
        "alert_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["episode_id"], ["alert_episodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("episode_id", "seq", name="uq_alert_messages_seq"),
    )
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["alert_messages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("message_id", "channel", name="uq_alert_deliveries_channel"),
    )
    op.create_table(
        "alert_mutes",
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("until", sa.DateTime(), nullable=False),
        sa.Column("muted_by", sa.String(length=191), nullable=False),
        sa.PrimaryKeyConstraint("rule"),
    )


def downgrade():
    op.drop_table("alert_mutes")
    op.drop_table("alert_deliveries")
    op.drop_table("alert_messages")
    op.drop_index("ix_alert_episodes_first_seen", table_name="alert_episodes")
    op.drop_index("ux_alert_episodes_active", table_name="alert_episodes")
    op.drop_table("alert_episodes")
