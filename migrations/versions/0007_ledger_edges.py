"""ledger edges: ids never reused on SQLite, a unique dispatch key, per-subscriber delivery

Revision ID: 0007_ledger_edges
Revises: 0006_diagnostics
Create Date: 2026-12-01 09:00:00

- SQLite: the ledger tables are rebuilt with AUTOINCREMENT keys (a plain rowid is
  reused after the newest row is deleted). Children are rebuilt against the new
  parent and the old children dropped first, so dropping the old parent cascades
  into nothing (SQLite's DROP TABLE deletes with foreign-key actions).
- ``task_runs.dispatch_uuid``: a single tracked job's Huey task id, unique, filled
  from ``context.dispatch_uuid`` (the oldest run keeps it where races made two).
- ``task_event_deliveries``: a subscriber's retries of an event it refused.
"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0007_ledger_edges"
down_revision = "0006_diagnostics"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ACTIVE_UNIT = "status IN ('pending', 'running')"


def _ledger_tables(suffix):
    """The four ledger tables as of this revision, named ``<table><suffix>``."""
    meta = sa.MetaData()
    runs = f"task_runs{suffix}"
    kw = {"sqlite_autoincrement": True}
    tables = [
        sa.Table(
            runs, meta,
            sa.Column("id", ID, primary_key=True),
            sa.Column("uuid", sa.String(36), nullable=False, unique=True),
            sa.Column("type", sa.String(120), nullable=False),
            sa.Column("status", sa.String(32), nullable=False),
            sa.Column("initiator", sa.String(120), nullable=False),
            sa.Column("context", sa.JSON(), nullable=False),
            sa.Column("units_total", sa.Integer(), nullable=False),
            sa.Column("units_completed", sa.Integer(), nullable=False),
            sa.Column("units_failed", sa.Integer(), nullable=False),
            sa.Column("units_skipped", sa.Integer(), nullable=False),
            sa.Column("started_at", sa.DateTime(), nullable=False),
            sa.Column("finished_at", sa.DateTime()),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
            sa.Column("created_by", sa.String(120)),
            sa.Column("updated_by", sa.String(120)),
            sa.Column("deleted_at", sa.DateTime()),
            sa.Column("dispatch_uuid", sa.String(64)),
            **kw,
        ),
        sa.Table(
            f"task_run_units{suffix}", meta,
            sa.Column("id", ID, primary_key=True),
            sa.Column("task_run_id", ID, sa.ForeignKey(f"{runs}.id", ondelete="CASCADE"),
                      nullable=False),
            sa.Column("unit_key", sa.String(191), nullable=False),
            sa.Column("tenant_id", sa.BigInteger()),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("last_error", sa.Text()),
            sa.Column("dispatch_token", sa.String(32)),
            sa.Column("queued_at", sa.DateTime()),
            sa.Column("started_at", sa.DateTime()),
            sa.Column("heartbeat_at", sa.DateTime()),
            sa.Column("finished_at", sa.DateTime()),
            sa.Column("stuck_notified_at", sa.DateTime()),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
            sa.Column("deleted_at", sa.DateTime()),
            **kw,
        ),
        sa.Table(
            f"operator_actions{suffix}", meta,
            sa.Column("id", ID, primary_key=True),
            sa.Column("task_run_id", ID, sa.ForeignKey(f"{runs}.id", ondelete="CASCADE")),
            sa.Column("action", sa.String(32), nullable=False),
            sa.Column("actor", sa.String(191), nullable=False),
            sa.Column("source", sa.String(16), nullable=False),
            sa.Column("address", sa.String(64)),
            sa.Column("detail", sa.JSON(), nullable=False),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            **kw,
        ),
        sa.Table(
            f"task_events{suffix}", meta,
            sa.Column("id", ID, primary_key=True),
            sa.Column("event_id", sa.String(36), nullable=False, unique=True),
            sa.Column("name", sa.String(64), nullable=False),
            sa.Column("task_run_id", ID, sa.ForeignKey(f"{runs}.id", ondelete="CASCADE")),
            sa.Column("payload", sa.JSON(), nullable=False),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("delivered_at", sa.DateTime()),
            **kw,
        ),
    ]
    return tables


INDEXES = {
    "task_runs": [
        ("ix_task_runs_type_id", ["type", "id"], {}),
        ("ix_task_runs_status_id", ["status", "id"], {}),
        ("ix_task_runs_finished_at", ["finished_at"], {}),
    ],
    "task_run_units": [
        ("ix_task_run_units_active", ["status", "heartbeat_at"],
         {"sqlite_where": sa.text(ACTIVE_UNIT)}),
        ("ix_task_run_units_key", ["unit_key", "id"], {}),
        ("ix_task_run_units_run_status", ["task_run_id", "status", "id"], {}),
        ("ix_task_run_units_tenant", ["tenant_id", "id"], {}),
        ("uq_task_run_units_run_key_live", ["task_run_id", "unit_key"],
         {"unique": True, "sqlite_where": sa.text("deleted_at IS NULL")}),
    ],
    "operator_actions": [("ix_operator_actions_run", ["task_run_id", "id"], {})],
    "task_events": [
        ("ix_task_events_run", ["task_run_id", "id"], {}),
        ("ix_task_events_undelivered", ["id"], {"sqlite_where": sa.text("delivered_at IS NULL")}),
    ],
}


def _rebuild_sqlite_with_autoincrement():
    old = {t.name: t for t in _ledger_tables("")}
    new = _ledger_tables("_new")
    bind = op.get_bind()
    for table in new:  # parent first: the children's new rows point at the new parent
        table.create(bind)
        name = table.name.removesuffix("_new")
        columns = ", ".join(c.name for c in old[name].columns if c.name != "dispatch_uuid")
        op.execute(f"INSERT INTO {table.name} ({columns}) SELECT {columns} FROM {name}")
    for table in reversed(new):  # children first: dropping the parent then cascades nowhere
        op.execute(f"DROP TABLE {table.name.removesuffix('_new')}")
    for table in new:  # renaming the parent rewrites the children's references to it
        op.execute(f"ALTER TABLE {table.name} RENAME TO {table.name.removesuffix('_new')}")
    for table_name, indexes in INDEXES.items():
        for name, columns, options in indexes:
            op.create_index(name, table_name, columns, **options)


def upgrade():
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite_with_autoincrement()
        dispatch = "json_extract(context, '$.dispatch_uuid')"
    else:
        op.add_column("task_runs", sa.Column("dispatch_uuid", sa.String(64), nullable=True))
        dispatch = "context ->> 'dispatch_uuid'"
    op.execute(
        f"UPDATE task_runs SET dispatch_uuid = {dispatch} WHERE id IN "
        f"(SELECT min(id) FROM task_runs WHERE {dispatch} IS NOT NULL GROUP BY {dispatch})"
    )
    op.create_index("uq_task_runs_dispatch_uuid", "task_runs", ["dispatch_uuid"], unique=True)
    op.create_table(
        "task_event_deliveries",
        sa.Column("id", ID, nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("subscriber", sa.String(191), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("parked_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["event_id"], ["task_events.event_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_task_event_deliveries_event_subscriber",
        "task_event_deliveries",
        ["event_id", "subscriber"],
        unique=True,
    )
    op.create_index(
        "ix_task_event_deliveries_due",
        "task_event_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("parked_at IS NULL"),
        sqlite_where=sa.text("parked_at IS NULL"),
    )
    op.create_index(
        "ix_task_event_deliveries_parked",
        "task_event_deliveries",
        ["parked_at", "id"],
        postgresql_where=sa.text("parked_at IS NOT NULL"),
        sqlite_where=sa.text("parked_at IS NOT NULL"),
    )


def downgrade():
    # The AUTOINCREMENT keys stay on SQLite: they are what any later revision expects too.
    op.drop_table("task_event_deliveries")
    op.drop_index("uq_task_runs_dispatch_uuid", table_name="task_runs")
    # A plain DROP COLUMN: a batch rebuild would drop task_runs and cascade into its units.
    op.execute("ALTER TABLE task_runs DROP COLUMN dispatch_uuid")
