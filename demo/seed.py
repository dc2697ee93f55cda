"""Fill the embedded database with a backoffice worth looking at.

The finished sweep is settled in this process through the ledger's own transitions
(``operations.settle_here``: claim, then complete or fail with the redacted reason of
a real exception), because a real statement run does not fail on demand. The running
and the cancelled runs are real runs of ``diagnostics.probe`` on the configured queue.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from accounts.permissions import PERMISSIONS
from accounts.services import create_user, find_user
from coursebuilder import stages
from extensions import db
from payments.statements import TYPE as STATEMENTS
from payments.statements import StatementError, generate_statement, unit_key
from taskrunner.contract import TaskUnit, operations, start_run
from tenancy.models import Tenant

OPERATOR = "operator@example.com"
TENANT_NAMES = (
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Stark",
    "Wayne",
    "Wonka",
    "Tyrell",
    "Cyberdyne",
    "Soylent",
    "Vandelay",
    "Pied Piper",
    "Aperture",
    "Black Mesa",
    "Massive Dynamic",
    "Oscorp",
    "Gringotts",
    "Monarch",
    "Nakatomi",
    "Dunder Mifflin",
    "Prestige",
    "Sirius",
    "Virtucon",
    "Gekko",
    "Oceanic",
    "Weyland",
    "Zorg",
    "Bluth",
    "Krusty",
    "Duff",
    "Sterling",
    "Paper Street",
    "Blue Sun",
    "Rekall",
    "Omni",
    "Yoyodyne",
    "Spacely",
    "Cogswell",
    "Ollivander",
)
STATUSES = ("active", "active", "active", "trial", "past_due", "active", "closed")


@dataclass
class Seeded:
    tenants: int = 0
    runs: list[str] = field(default_factory=list)
    builds: list[str] = field(default_factory=list)
    operator: str = OPERATOR
    password: str | None = None


def seed_tenants() -> int:
    existing = db.session.execute(select(func.count()).select_from(Tenant)).scalar_one()
    if existing:
        return 0
    for i, name in enumerate(TENANT_NAMES):
        db.session.add(Tenant(name=f"{name} Ltd", status=STATUSES[i % len(STATUSES)]))
    db.session.commit()
    return len(TENANT_NAMES)


def _sweep_outcome(tenant_id: int, period: str) -> None:
    """The work of one tenant in the demo sweep: a real statement, or a real failure."""
    if tenant_id % 9 == 4:
        raise StatementError(f"tenant {tenant_id} has no billing address for {period}")
    if tenant_id % 11 == 7:
        # What a payment provider's driver raises: its message must never reach the ledger.
        raise OperationalError(
            "SELECT balance FROM vendor WHERE token=%(t)s",
            {"t": "sk_live_DEMO"},
            ConnectionError("vendor timed out"),
        )
    generate_statement(tenant_id, period)


def finished_sweep(period: str) -> str:
    tenants = db.session.execute(select(Tenant.id).order_by(Tenant.id)).scalars().all()
    db.session.rollback()
    return operations.settle_here(
        STATEMENTS,
        {"period": period},
        "schedule",
        [TaskUnit(unit_key(t, period), t) for t in tenants],
        lambda unit: _sweep_outcome(unit.tenant_id, period),
    )


def seed_operator() -> str | None:
    if find_user(OPERATOR) is not None:
        return None
    password = secrets.token_urlsafe(12)
    create_user(OPERATOR, password, PERMISSIONS)
    return password


def seed() -> Seeded:
    result = Seeded(tenants=seed_tenants())
    result.runs.append(finished_sweep("2026-09"))
    result.runs.append(finished_sweep("2026-10"))
    cancelled = start_run("diagnostics.probe", {"units": 30, "sleep_ms": 1000}, "cli")
    operations.cancel(cancelled.uuid, operations.Actor("demo", "cli"))
    result.runs.append(cancelled.uuid)
    running = start_run(
        "diagnostics.probe",
        {"units": 40, "sleep_ms": 3000, "fail_every": 9, "vendor_fail_every": 13},
        "cli",
    )
    result.runs.append(running.uuid)
    first_tenant = db.session.execute(select(func.min(Tenant.id))).scalar_one()
    result.builds.append(
        stages.start(
            first_tenant,
            "Onboarding for new accountants",
            quizzes=2,
            concurrency=2,
            fake={"latency_ms": 1500},
            initiator="cli",
        )
    )
    result.password = seed_operator()
    return result
