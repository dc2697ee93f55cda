"""tenant-facing async requests and tenant API tokens

Revision ID: 0005_asyncrequests
Revises: 0004_documents
Create Date: 2026-11-29 11:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0005_asyncrequests'
down_revision = '0004_documents'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('async_requests',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('subject', sa.String(length=191), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('async_requests', schema=None) as batch_op:
        batch_op.create_index('ix_async_requests_finished_at', ['finished_at'], unique=False)
        batch_op.create_index('ix_async_requests_status_updated', ['status', 'updated_at'],
                              unique=False)
        batch_op.create_index('ix_async_requests_tenant', ['tenant_id', 'id'], unique=False)
        batch_op.create_index('uq_async_requests_pending', ['tenant_id', 'kind', 'subject'],
                              unique=True, postgresql_where=sa.text("status = 'pending'"),
                              sqlite_where=sa.text("status = 'pending'"))

    op.create_table('tenant_api_tokens',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('public_id', sa.String(length=16), nullable=False),
    sa.Column('tenant_id', sa.BigInteger(), nullable=False),
    sa.Column('name', sa.String(length=120), nullable=False),
    sa.Column('secret_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('last_used_at', sa.DateTime(), nullable=True),
    sa.Column('revoked_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('public_id')
    )
    with op.batch_alter_table('tenant_api_tokens', schema=None) as batch_op:
        batch_op.create_index('ix_tenant_api_tokens_tenant', ['tenant_id', 'id'], unique=False)


def downgrade():
    with op.batch_alter_table('tenant_api_tokens', schema=None) as batch_op:
        batch_op.drop_index('ix_tenant_api_tokens_tenant')

    op.drop_table('tenant_api_tokens')
    with op.batch_alter_table('async_requests', schema=None) as batch_op:
        batch_op.drop_index('uq_async_requests_pending', postgresql_where=sa.text("status = 'pending'"),
                            sqlite_where=sa.text("status = 'pending'"))
        batch_op.drop_index('ix_async_requests_tenant')
        batch_op.drop_index('ix_async_requests_status_updated')
        batch_op.drop_index('ix_async_requests_finished_at')

    op.drop_table('async_requests')
