"""Tenant lifecycle services: plain values in, domain errors out."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from sqlalchemy import case, func, literal, or_, select

from database import iso, lowered, take_turns, utcnow, write_transaction
from extensions import db
from security.echo import printable
from tenancy.models import CLOSED, Tenant

MAX_ID = 2**63 - 1
NAME_MAX = 191


class TenantError(Exception):
    """A refusal an operator may read."""


def close(tenant_id: int) -> bool:
    """Close a tenant: its API tokens stop working at once.

    Returns whether this call closed it (False: it already was closed).
    """
    with write_transaction(db.session):
        tenant = db.session.get(Tenant, tenant_id) if 0 < tenant_id <= MAX_ID else None
        if tenant is None:
            raise TenantError(f"no tenant {tenant_id}")
        if tenant.status == CLOSED:
            return False
        tenant.status = CLOSED
        tenant.status_changed_at = utcnow()
    return True


def tenant_dict(tenant: Tenant) -> dict[str, Any]:
    return {
        "id": tenant.id,
        "name": tenant.name,
        "status": tenant.status,
        "created_at": iso(tenant.created_at),
    }


def create(name: str) -> Tenant:
    """A new active tenant; the name is what operators search for, so no other tenant has
    it (in any case)."""
    clean = " ".join(name.split())
    if not clean:
        raise TenantError("a tenant needs a name")
    if len(clean) > NAME_MAX:
        raise TenantError(f"a tenant name has at most {NAME_MAX} characters")
    if not printable(clean):
        raise TenantError("a tenant name cannot hold control characters or text not UTF-8")
    with write_transaction(db.session):
        if clean.lower() in _names_taken():
            raise TenantError(f"a tenant is already named {clean!r} (names ignore case)")
        tenant = Tenant(name=clean, status="active")
        db.session.add(tenant)
    return tenant


def listing(limit: int | None = None) -> list[Tenant]:
    stmt = select(Tenant).order_by(Tenant.id)
    if limit:
        stmt = stmt.limit(limit)
    return list(db.session.execute(stmt).scalars())


@dataclass(frozen=True)
class ImportReport:
    created: int
    skipped: int


def import_csv(handle: TextIO) -> ImportReport:
    """Create tenants from a CSV with a ``name`` column, in one transaction.

    A name already taken (any case) is skipped, so importing a file twice creates
    nothing the second time. A file without a ``name`` column, or with a bad name,
    creates nothing and says which line.
    """
    try:
        reader = csv.DictReader(handle, strict=True)
        fields = [f.strip().lower() for f in reader.fieldnames or []]
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TenantError(f"not a CSV file: {exc}") from None
    if "name" not in fields:
        raise TenantError("the CSV needs a header line with a 'name' column")
    column = (reader.fieldnames or [])[fields.index("name")]
    names: list[str] = []
    try:
        for row in reader:
            line = reader.line_num  # the file's line: blank lines are skipped
            raw = row.get(column) or ""
            if "\n" in raw or "\r" in raw:
                # A quote left open swallows the lines after it into one name.
                start = line - raw.count("\n")
                raise TenantError(
                    f"line {start}: a name runs over several lines (a quote left open?)"
                )
            name = " ".join(raw.split())
            if not name:
                raise TenantError(f"line {line}: empty name")
            if len(name) > NAME_MAX or not printable(name):
                raise TenantError(f"line {line}: not a valid tenant name")
            names.append(name)
    except (csv.Error, UnicodeDecodeError) as exc:
        # The reader counts the lines of the records it finished: this one starts after.
        raise TenantError(f"not a CSV file: line {reader.line_num + 1}: {exc}") from None
    created = skipped = 0
    with write_transaction(db.session):
        taken = _names_taken()
        for name in names:
            if name.lower() in taken:
                skipped += 1
                continue
            taken.add(name.lower())
            db.session.add(Tenant(name=name, status="active"))
            created += 1
    return ImportReport(created, skipped)


def _names_taken() -> set[str]:
    """Every tenant's name in lower case, read in a write transaction that other creates
    and imports wait for, so none adds a name between this read and its own write."""
    take_turns(db.session, "tenants:names")
    # Lowered here, not in SQL: SQLite's lower() leaves letters beyond ASCII as they are.
    return {n.lower() for n in db.session.execute(select(Tenant.name)).scalars()}


def _id_in(text: str) -> int | None:
    """The tenant id ``text`` is, if it is one (ASCII digits in the id range)."""
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) <= MAX_ID else None


def _matching(text: str) -> Any:
    """Tenants whose id is ``text`` or whose name contains it (any case)."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    named = lowered(db.session, Tenant.name).like(f"%{escaped}%", escape="\\")
    tenant_id = _id_in(text)
    return select(Tenant).where(named if tenant_id is None else or_(named, Tenant.id == tenant_id))


def matching(text: str, limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
    """Tenants whose id is ``text`` or whose name contains it (any case), a page of them:
    the tenant with that id first."""
    text = text.strip()
    if not text:
        return []
    tenant_id = _id_in(text)
    first = Tenant.id == tenant_id if tenant_id is not None else literal(False)
    found = db.session.execute(
        _matching(text)
        .order_by(case((first, 0), else_=1), Tenant.name, Tenant.id)
        .offset(offset)
        .limit(limit)
    ).scalars()
    return [tenant_dict(t) for t in found]


def count_matching(text: str, cap: int = 1000) -> int:
    """How many tenants ``matching`` finds, counted up to ``cap``."""
    text = text.strip()
    if not text:
        return 0
    limited = _matching(text).with_only_columns(literal(1)).limit(cap).subquery()
    return db.session.execute(select(func.count()).select_from(limited)).scalar_one()


def names(ids: Iterable[int | None]) -> dict[int, str]:
    """Tenant names by id, in one query (for pages that show tenant ids)."""
    wanted = sorted({int(i) for i in ids if i is not None and 0 < int(i) <= MAX_ID})
    if not wanted:
        return {}
    rows = db.session.execute(
        select(Tenant.id, Tenant.name).where(Tenant.id.in_(wanted[:1000]))
    ).all()
    return {row.id: row.name for row in rows}
