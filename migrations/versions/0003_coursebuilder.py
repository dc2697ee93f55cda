"""course builder: generation runs, steps, events

Revision ID: 0003_coursebuilder
Revises: 0002_accounts
Create Date: 2026-11-29 11:00:00

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0003_coursebuilder'
down_revision = '0002_accounts'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('builder_runs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.BigInteger(), nullable=False),
    sa.Column('title', sa.String(length=191), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('initiator', sa.String(length=120), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('builder_runs', schema=None) as batch_op:
        batch_op.create_index('ix_builder_runs_status_id', ['status', 'id'], unique=False)
        batch_op.create_index('ix_builder_runs_tenant_id', ['tenant_id', 'id'], unique=False)

    op.create_table('builder_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=True),
    sa.Column('step', sa.String(length=64), nullable=True),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['builder_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('builder_events', schema=None) as batch_op:
        batch_op.create_index('ix_builder_events_run_id', ['run_id', 'id'], unique=False)

    op.create_table('builder_steps',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('output', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('queued_at', sa.DateTime(), nullable=True),
    sa.Column('started_at', sa.DateTime(), nullable=True),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['builder_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('builder_steps', schema=None) as batch_op:
        batch_op.create_index('ix_builder_steps_run_status', ['run_id', 'status', 'position'], unique=False)
        batch_op.create_index('uq_builder_steps_run_stage_key', ['run_id', 'stage', 'key'], unique=True)


def downgrade():
    with op.batch_alter_table('builder_steps', schema=None) as batch_op:
        batch_op.drop_index('uq_builder_steps_run_stage_key')
        batch_op.drop_index('ix_builder_steps_run_status')

    op.drop_table('builder_steps')
    with op.batch_alter_table('builder_events', schema=None) as batch_op:
        batch_op.drop_index('ix_builder_events_run_id')

    op.drop_table('builder_events')
    with op.batch_alter_table('builder_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_builder_runs_tenant_id')
        batch_op.drop_index('ix_builder_runs_status_id')

    op.drop_table('builder_runs')
