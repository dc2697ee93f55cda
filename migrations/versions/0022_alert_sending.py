"""Since when a process sends an alert's message to a channel

The delivery job and the outbox's relay (or two events of one episode) could hand one
message to a channel at once: each read it undelivered, each sent it, and the receiver
got it twice. A process now takes the sending of a message first; another one handed it
meanwhile is refused and tried again later, when it finds it delivered.

Revision ID: 0022_alert_sending
Revises: 0021_stream_processes
Create Date: 2026-12-04 19:15:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0022_alert_sending"
down_revision = "0021_stream_processes"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.add_column(sa.Column("sending_since", sa.DateTime(), nullable=True))


def downgrade():
    with op.batch_alter_table("alert_deliveries") as batch:
        batch.drop_column("sending_since")
