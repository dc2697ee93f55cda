"""Shared by the tenant API tests: tenants, tokens, a failing statements table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from flask import Flask
from sqlalchemy import text

from asyncrequests import tokens
from extensions import db
from tenancy.models import Tenant

# A period long over, for which tenants in standing since 2020 are eligible.
PERIOD = "2025-10"
# A driver error carrying these must never reach a tenant, an operator, or a table.
DRIVER_SECRET = "sk_live_STATEMENT_DRIVER_SECRET"


def make_tenant(name: str, status: str = "active") -> int:
    tenant = Tenant(name=name, status=status, status_changed_at=datetime(2020, 1, 1))
    db.session.add(tenant)
    db.session.commit()
    return tenant.id


def tenant_with_token(name: str) -> tuple[int, str]:
    tenant_id = make_tenant(name)
    return tenant_id, tokens.issue(tenant_id, "tests").token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def statements_table_failing(app: Flask) -> Iterator[None]:
    """Make every insert into ``statements`` fail in the database, with a secret in the error.

    A real driver error, raised by the server in whatever process inserts
    (a consumer included); the trigger is dropped afterwards whatever happens.
    """
    with app.app_context():
        create, drop = _trigger_statements(db.engine.dialect.name)
        for statement in create:
            db.session.execute(statement)
        db.session.commit()
    try:
        yield
    finally:
        with app.app_context():
            for statement in drop:
                db.session.execute(statement)
            db.session.commit()


def _trigger_statements(dialect: str) -> tuple[list, list]:
    if dialect == "postgresql":
        create = [
            text(
                "CREATE FUNCTION statements_fail() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN RAISE EXCEPTION 'insert refused, key {DRIVER_SECRET}'; END $$"
            ),
            text(
                "CREATE TRIGGER statements_fail BEFORE INSERT ON statements "
                "FOR EACH ROW EXECUTE FUNCTION statements_fail()"
            ),
        ]
        drop = [
            text("DROP TRIGGER IF EXISTS statements_fail ON statements"),
            text("DROP FUNCTION IF EXISTS statements_fail()"),
        ]
    else:
        create = [
            text(
                "CREATE TRIGGER statements_fail BEFORE INSERT ON statements BEGIN "
                f"SELECT RAISE(ABORT, 'insert refused, key {DRIVER_SECRET}'); END"
            )
        ]
        drop = [text("DROP TRIGGER IF EXISTS statements_fail")]
    return create, drop
