"""A tenant's name is what operators search for: no two tenants share one, in any case.

`tenants create` took a name another tenant had while `tenants import` skipped it; and
a create or an import that read the names while another was between its read and its
write added the name twice. The race is forced on PostgreSQL with real sessions
(``tests/interleave.py``); on SQLite each write holds the database lock from its first
statement.
"""

from __future__ import annotations

import io

import pytest
from sqlalchemy import func, select

from extensions import db
from tenancy import services as tenants
from tenancy.models import Tenant
from tests.conftest import BACKEND
from tests.interleave import Hold, InThread, wait_until_blocked_on_a_lock


def named(name: str) -> int:
    db.session.rollback()
    return db.session.scalar(
        select(func.count()).select_from(Tenant).where(func.lower(Tenant.name) == name)
    )


def test_a_name_another_tenant_has_in_any_case_is_refused_and_creates_nothing(app, cli):
    assert cli.invoke(args=["tenants", "create", "Acme Corporation"]).exit_code == 0
    for taken in ("acme corporation", "  ACME   Corporation "):
        refused = cli.invoke(args=["tenants", "create", taken])
        assert refused.exit_code == 1
        assert refused.stderr.count("\n") == 1
        assert "a tenant is already named" in refused.stderr
    assert cli.invoke(args=["tenants", "create", "Acme Corporation Ltd"]).exit_code == 0
    with app.app_context():
        assert named("acme corporation") == 1
        assert db.session.scalar(select(func.count()).select_from(Tenant)) == 2


def test_names_beyond_ascii_are_compared_in_any_case(app):
    with app.app_context():
        tenants.create("École Lumière")
        with pytest.raises(tenants.TenantError, match="already named"):
            tenants.create("ÉCOLE LUMIÈRE")
        report = tenants.import_csv(io.StringIO("name\nécole lumière\nÉcole Neuve\n"))
        assert (report.created, report.skipped) == (1, 1)


def test_a_search_finds_a_name_beyond_ascii_in_any_case_even_typed_as_it_is(app):
    with app.app_context():
        wanted = tenants.create("Ärzte Österreich").id
        tenants.create("Arzte Osterreich")
        for typed in ("Ärzte", "ärzte", "ÄRZTE", "österreich", "zte Ö"):
            found = [t["id"] for t in tenants.matching(typed)]
            assert found == [wanted], typed
            assert tenants.count_matching(typed) == 1, typed


@pytest.mark.skipif(BACKEND != "postgres", reason="forced with PostgreSQL sessions")
@pytest.mark.parametrize("second", ["create", "import"])
def test_a_name_added_while_another_create_is_between_its_read_and_write_is_added_once(app, second):
    def add() -> object:
        if second == "create":
            return tenants.create("Acme")
        return tenants.import_csv(io.StringIO("name\nacme\n"))

    with app.app_context():
        with Hold(db.engine, "first", lambda s: s.startswith("INSERT INTO tenants")) as held:
            first = InThread(app, "first", tenants.create, "Acme")
            held.wait_reached()  # the first has read the names and not yet written
            other = InThread(app, "second", add)
            wait_until_blocked_on_a_lock()  # the second waits for the first's turn
            held.release()
            first.join()
            other.join()
        assert first.error is None
        if second == "create":
            assert isinstance(other.error, tenants.TenantError)
        else:
            assert other.error is None and other.result.skipped == 1
        assert named("acme") == 1
