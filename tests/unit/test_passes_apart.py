"""CI runs the SQLite pass beside the PostgreSQL pass: the former keeps off the latter's
shared database, which that pass closes to connections in its outage tests."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine

from tests.conftest import BACKEND, PG_URL

pytestmark = pytest.mark.skipif(BACKEND == "postgres", reason="a rule of the SQLite pass")


def test_the_sqlite_pass_refuses_to_connect_to_the_shared_postgresql_database():
    with pytest.raises(RuntimeError, match="may not use PostgreSQL's shared database"):
        create_engine(PG_URL).connect()
    with pytest.raises(RuntimeError, match="may not use PostgreSQL's shared database"):
        psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://"))


def test_a_database_of_a_tests_own_is_still_reached():
    # Port 1 refuses: the connection was tried, not refused by the rule.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect("host=127.0.0.1 port=1 dbname=test_drift_1 connect_timeout=2")
