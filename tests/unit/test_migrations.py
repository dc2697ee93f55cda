"""Models and migrations never drift, on either backend: the migrations upgrade an empty
database, and autogenerate then finds nothing to add, drop or change."""

from __future__ import annotations

import os

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask_migrate import upgrade
from sqlalchemy import create_engine, text

from app import create_app
from extensions import db
from startup import enable_migrations
from tests.conftest import PG_URL, ROOT, require_postgres

# Its own scratch database, named after the test database and this process, so suites
# running at once (CI runs both backends together) never share it.
DRIFT_DB = f"{PG_URL.rsplit('/', 1)[1]}_drift_{os.getpid()}"


def drift(url: str, instance: str) -> list:
    """What autogenerate would change after the migrations upgraded an empty ``url``."""
    app = create_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "SECRET_KEY": "x",
            "TESTING": True,
            "INSTANCE_PATH": instance,
        }
    )
    enable_migrations(app)
    with app.app_context():
        upgrade(directory=str(ROOT / "migrations"), revision="heads")
        with db.engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_object": _ours}
            )
            diff = compare_metadata(context, db.metadata)
        db.engine.dispose()
    return diff


def test_models_and_migrations_do_not_drift_on_postgresql(tmp_path):
    require_postgres()
    admin = create_engine(PG_URL.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DRIFT_DB} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {DRIFT_DB}"))
    try:
        diff = drift(PG_URL.rsplit("/", 1)[0] + f"/{DRIFT_DB}", str(tmp_path))
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {DRIFT_DB} WITH (FORCE)"))
        admin.dispose()
    assert diff == []


def test_models_and_migrations_do_not_drift_on_sqlite(tmp_path):
    assert drift(f"sqlite:///{tmp_path / 'drift.db'}", str(tmp_path)) == []


def _ours(obj, name, type_, reflected, compare_to):
    return not (type_ == "table" and (name or "").startswith("huey_"))
