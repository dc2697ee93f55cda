"""Every migration can be taken back, on either backend, and a rollback keeps the rows.

The chain is walked from base to head: each revision is upgraded to, downgraded to its
parent and upgraded again. After the downgrade the schema must be the parent's as a fresh
upgrade left it (tables, columns with their types and nullability, indexes with their
partial conditions, unique, foreign-key and check constraints, and on SQLite whether ids
may be reused), and after the upgrade again the revision's; at head nothing drifts from
the models. Then a database with the demo's rows is taken back one release and up again,
as an operator rolling back the last release does, and keeps every row.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from datetime import datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask_migrate import downgrade, upgrade
from huey.storage import SqliteStorage
from sqlalchemy import MetaData, create_engine, func, inspect, select, text

from app import create_app
from extensions import db
from startup import enable_migrations
from taskrunner.ledger import forget_cached_runs, release_hot_connection
from tests.conftest import BACKEND, PG_URL, ROOT, require_postgres

MIGRATIONS = str(ROOT / "migrations")
# Its own scratch database, as the drift check has: suites running at once never share it.
SCRATCH_DB = f"{PG_URL.rsplit('/', 1)[1]}_rollback_{os.getpid()}"
SQLITE_WHERE = re.compile(r"\bWHERE\b(.*)$", re.IGNORECASE | re.DOTALL)


def ours(name: str) -> bool:
    return name != "alembic_version" and not name.startswith("huey_")


def _where(index: dict, sqlite_sql: dict[str, str]) -> str | None:
    """An index's partial condition, whitespace folded (reflected apart on PostgreSQL)."""
    where = index.get("dialect_options", {}).get("postgresql_where")
    if where is None and index["name"] in sqlite_sql:
        found = SQLITE_WHERE.search(sqlite_sql[index["name"]] or "")
        where = found.group(1) if found else None
    if where is None:
        return None
    where = " ".join(str(where).split())
    # PostgreSQL gives the condition back in parentheses.
    return where[1:-1] if where.startswith("(") and where.endswith(")") else where


def schema(conn) -> dict:
    """What reflection sees of the database: every table of ours and what it holds."""
    found = inspect(conn)
    sqlite_sql: dict[str, str] = {}
    if conn.dialect.name == "sqlite":
        sqlite_sql = dict(conn.execute(text("SELECT name, sql FROM sqlite_master")).all())
    tables = {}
    for table in sorted(filter(ours, found.get_table_names())):
        checks = []
        if conn.dialect.name != "sqlite":  # SQLite reflects them only from its own text
            checks = sorted(
                (c["name"], " ".join(c["sqltext"].split()))
                for c in found.get_check_constraints(table)
            )
        tables[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(table)
            ],
            "primary key": found.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]), _where(i, sqlite_sql))
                for i in found.get_indexes(table)
            ),
            "unique": sorted(
                (u["name"] or "", tuple(u["column_names"]))
                for u in found.get_unique_constraints(table)
            ),
            "foreign keys": sorted(
                (
                    tuple(f["constrained_columns"]),
                    f["referred_table"],
                    tuple(f["referred_columns"]),
                    (f.get("options") or {}).get("ondelete"),
                )
                for f in found.get_foreign_keys(table)
            ),
            "checks": checks,
            # A table rebuilt without AUTOINCREMENT reuses the newest deleted row's id.
            "ids never reused": "AUTOINCREMENT" in (sqlite_sql.get(table) or "").upper(),
        }
    return tables


@contextmanager
def scratch_url(tmp_path):
    """An empty database of the test's own on the chosen backend, dropped after."""
    if BACKEND != "postgres":
        yield f"sqlite:///{tmp_path / 'rollback.db'}"
        return
    require_postgres()
    base = PG_URL.rsplit("/", 1)[0]
    admin = create_engine(base + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {SCRATCH_DB} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {SCRATCH_DB}"))
    try:
        yield f"{base}/{SCRATCH_DB}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {SCRATCH_DB} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def scratch_app(tmp_path):
    with scratch_url(tmp_path) as url:
        app = create_app(
            {
                "SQLALCHEMY_DATABASE_URI": url,
                "SECRET_KEY": "x",
                "TESTING": True,
                "INSTANCE_PATH": str(tmp_path),
                "QUEUE_DRIVER": "sqlite",
                "QUEUE_SQLITE_PATH": str(tmp_path / "queue.sqlite3"),
            }
        )
        enable_migrations(app)
        with app.app_context():
            try:
                yield app
            finally:
                # What the demo's runs left open on this test's files, as make_app closes it.
                release_hot_connection()
                forget_cached_runs()
                db.session.remove()
                for huey in app.extensions["queues"].all().values():
                    if isinstance(huey.storage, SqliteStorage):
                        huey.storage.close()
                db.engine.dispose()


def current_schema() -> dict:
    db.session.remove()
    with db.engine.connect() as conn:
        return schema(conn)


def chain() -> list[tuple[str, str | None]]:
    """(revision, its parent) from base to head."""
    script = ScriptDirectory(MIGRATIONS)
    steps = [(s.revision, s.down_revision) for s in script.walk_revisions("base", "heads")]
    return list(reversed(steps))


def differences(found: dict, expected: dict) -> dict:
    """Per table, what differs: ``{table: {aspect: (found, expected)}}``."""
    return {
        table: {
            aspect: (value, expected.get(table, {}).get(aspect))
            for aspect, value in found.get(table, {"missing": True}).items()
            if value != expected.get(table, {}).get(aspect)
        }
        for table in sorted(set(found) | set(expected))
        if found.get(table) != expected.get(table)
    }


def kept_on_purpose(revision: str, found: dict) -> dict:
    """``found`` with what a downgrade keeps on purpose set back to the parent's.

    0007 gave the ledger's tables AUTOINCREMENT keys on SQLite, and its downgrade keeps
    them (its comment says why): the older code runs the same on them.
    """
    if revision != "0007_ledger_edges":
        return found
    return {
        table: {**shape, "ids never reused": False} if table in LEDGER else shape
        for table, shape in found.items()
    }


NO_REUSE = "sqlite_autoincrement"
LEDGER = {"task_runs", "task_run_units", "operator_actions", "task_events"}


def test_every_migration_downgrades_to_its_parents_schema_and_upgrades_again(scratch_app):
    steps = chain()
    assert steps[0][1] is None and len(steps) >= 22
    fresh = {None: current_schema()}
    for revision, parent in steps:
        upgrade(directory=MIGRATIONS, revision=revision)
        fresh[revision] = current_schema()
        downgrade(directory=MIGRATIONS, revision=parent or "base")
        down = kept_on_purpose(revision, current_schema())
        assert differences(down, fresh[parent]) == {}, f"{revision} downgraded to another schema"
        upgrade(directory=MIGRATIONS, revision=revision)
        again = current_schema()
        assert differences(again, fresh[revision]) == {}, f"{revision} upgraded again differs"
    # The comparison sees what it must: a partial index's condition, SQLite's keys.
    units = fresh[steps[-1][0]]["task_run_units"]
    live_key = ("task_run_id", "unit_key"), True, "deleted_at IS NULL"
    assert ("uq_task_run_units_run_key_live", *live_key) in units["indexes"]
    assert units["ids never reused"] == (db.engine.dialect.name == "sqlite")
    if db.engine.dialect.name == "sqlite":  # autogenerate does not compare AUTOINCREMENT
        kept_keys = {t for t, shape in fresh[steps[-1][0]].items() if shape["ids never reused"]}
        assert kept_keys == {t.name for t in db.metadata.sorted_tables if t.kwargs.get(NO_REUSE)}
    db.session.remove()
    with db.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": _models_only}
        )
        assert compare_metadata(context, db.metadata) == []


def _models_only(obj, name, type_, reflected, compare_to):
    return not (type_ == "table" and not ours(name or ""))


# The last release's migrations, newest first, each with the revision before it.
LAST_RELEASES = ("0021_stream_processes", "0020_unended_slots", "0019_reason_fold")
FILLER = {"INTEGER": 1, "BIGINT": 1, "BOOLEAN": True, "JSON": {"filled": True}}


def fill_empty_tables() -> None:
    """A row in each table the demo leaves empty, so a rollback has every table to keep."""
    meta = MetaData()
    meta.reflect(db.engine, only=lambda name, _: ours(name))
    now = datetime(2026, 12, 4, 12, 0, 0)
    for table in meta.sorted_tables:
        if db.session.execute(select(func.count()).select_from(table)).scalar_one():
            continue
        row = {}
        for column in table.columns:
            kind = str(column.type).split("(")[0]
            if column.foreign_keys:
                (key,) = column.foreign_keys
                row[column.name] = db.session.execute(
                    select(key.column).order_by(key.column).limit(1)
                ).scalar_one()
            elif kind in ("DATETIME", "TIMESTAMP WITHOUT TIME ZONE", "TIMESTAMP"):
                row[column.name] = now
            else:
                row[column.name] = FILLER.get(kind, f"{table.name}-{column.name}"[:16])
        db.session.execute(table.insert().values(row))
    db.session.commit()


def every_row() -> dict[str, dict[str, list]]:
    """Every table's rows, column by column, in key order."""
    db.session.remove()
    meta = MetaData()
    meta.reflect(db.engine, only=lambda name, _: ours(name))
    rows = {}
    for table in meta.sorted_tables:
        keys = list(table.primary_key.columns) or list(table.columns)
        found = db.session.execute(select(table).order_by(*keys)).mappings().all()
        rows[table.name] = {c.name: [r[c.name] for r in found] for c in table.columns}
    db.session.remove()
    return rows


def test_a_seeded_database_rolled_back_one_release_and_upgraded_again_keeps_its_rows(
    scratch_app,
):
    cli = scratch_app.test_cli_runner()
    assert cli.invoke(args=["db", "upgrade"]).exit_code == 0
    seeded = cli.invoke(args=["demo", "seed"])
    assert seeded.exit_code == 0, seeded.output
    fill_empty_tables()
    before = every_row()
    assert all(any(columns.values()) for columns in before.values())

    for target in LAST_RELEASES:
        down = cli.invoke(args=["db", "downgrade", target])
        assert down.exit_code == 0, down.output
        db.session.remove()
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == target
        kept = every_row()
        up = cli.invoke(args=["db", "upgrade"])
        assert up.exit_code == 0, up.output
        after = every_row()
        # Only what a taken-back migration added goes: its columns, back empty.
        for table, columns in before.items():
            gone = set(columns) - set(kept[table])
            expected = {name: values for name, values in columns.items() if name not in gone}
            assert kept[table] == expected, f"rows of {table} changed by a rollback to {target}"
            assert {name: after[table][name] for name in expected} == expected, (
                f"rows of {table} changed by the upgrade after a rollback to {target}"
            )
            assert all(value is None for name in gone for value in after[table][name])
        before = after
