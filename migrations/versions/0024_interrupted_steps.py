"""The steps an ended build left running read as interrupted

A build that failed while a step ran (its worker killed, a lost host) left that step
running for ever: the recovery looks at running builds alone, and a retry, which queues
only the steps not done, waited for it. A build's failure now fails its running steps as
interrupted; this pass does it for the builds that ended before. The downgrade leaves
them failed: the release before reads a failed step as it reads any.

Revision ID: 0024_interrupted_steps
Revises: 0023_identifier_fold
Create Date: 2026-12-05 00:25:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0024_interrupted_steps"
down_revision = "0023_identifier_fold"
branch_labels = None
depends_on = None

# coursebuilder.stages.INTERRUPTED when this was written (a migration keeps its own words).
INTERRUPTED = "interrupted: the build failed while this step ran"


def upgrade():
    runs = sa.table("builder_runs", sa.column("id"), sa.column("status"), sa.column("finished_at"))
    steps = sa.table(
        "builder_steps",
        sa.column("run_id"),
        sa.column("status"),
        sa.column("error"),
        sa.column("started_at"),
        sa.column("finished_at"),
    )
    ended = (
        sa.select(runs.c.finished_at)
        .where(runs.c.id == steps.c.run_id, runs.c.status != "running")
        .scalar_subquery()
    )
    op.get_bind().execute(
        steps.update()
        .where(
            steps.c.status == "running",
            sa.exists().where(runs.c.id == steps.c.run_id, runs.c.status != "running"),
        )
        .values(
            status="failed",
            error=INTERRUPTED,
            finished_at=sa.func.coalesce(ended, steps.c.started_at),
        )
    )


def downgrade():
    pass
