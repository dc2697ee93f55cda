"""Databases the tests and benchmarks own: made, migrated, emptied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from harness.environment import ROOT


def ensure_postgres_database(url: str) -> None:
    """Create the database named in ``url`` when it does not exist yet."""
    target = make_url(url)
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        found = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": target.database}
        ).first()
        if found is None:
            conn.execute(text(f'CREATE DATABASE "{target.database}"'))
    admin.dispose()


def reset_postgres_schema(url: str) -> None:
    """Empty a database we own: drop and recreate its public schema."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def build_app(config: dict[str, Any]) -> Flask:
    """An app on the given settings, its schema migrated to the heads; the calling process
    (a benchmark, the chaos run, the test session) logs as the app's settings say."""
    from flask_migrate import upgrade

    from app import create_app
    from extensions import db
    from startup import enable_migrations, prepare_process

    app = create_app(config)
    prepare_process(app)
    enable_migrations(app)
    with app.app_context():
        try:
            upgrade(directory=str(ROOT / "migrations"), revision="heads")
        except SystemExit as exc:
            # Flask-Migrate logs the cause and exits; a caller running several
            # benchmarks must get an error it can record instead.
            raise RuntimeError(
                f"migrating {db.engine.url.render_as_string()} to the heads failed "
                "(the cause is logged above; a database left by an older migration "
                "chain needs a reset)"
            ) from exc
        db.session.remove()
        db.engine.dispose()
    return app


def fresh_postgres_app(url: str, folder: Path, **config: Any) -> Flask:
    """An app on a PostgreSQL database we own, made if need be and emptied, migrated, its
    instance files and log in ``folder``."""
    ensure_postgres_database(url)
    reset_postgres_schema(url)
    return build_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "SECRET_KEY": "bench",
            "INSTANCE_PATH": str(folder),
            "LOG_FILE": str(Path(folder) / "bench.log"),
            **config,
        }
    )
