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

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask_migrate import downgrade, upgrade
from sqlalchemy import create_engine, inspect, text

from app import create_app
from extensions import db
from startup import enable_migrations
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
                db.session.remove()
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
