"""The process that holds each live stream's lease

A web process killed outright (an out-of-memory kill, gunicorn's worker timeout) never
deletes its streams' leases: they lapsed only after 30 s, and a session at its stream cap
was refused until then although another process was up. A lease now names its host and
process, so a process of the same host drops the leases of one that is gone at once.
Leases written before have neither and lapse as before.

Revision ID: 0021_stream_processes
Revises: 0020_unended_slots
Create Date: 2026-12-04 16:10:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0021_stream_processes"
down_revision = "0020_unended_slots"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("live_streams") as batch:
        batch.add_column(sa.Column("host", sa.String(length=191), nullable=True))
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))


def downgrade():
    with op.batch_alter_table("live_streams") as batch:
        batch.drop_column("pid")
        batch.drop_column("host")
