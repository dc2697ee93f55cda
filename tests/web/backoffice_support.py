"""Fixtures and helpers of the backoffice tests (imported by the test modules that use them)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import webtest

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.factories import Broken, ControlledTask

VIEW = "task-runner.runs.view"
MANAGE = "task-runner.runs.manage"
PASSWORD = "correct horse battery"
ADDRESS = "203.0.113.7"


@dataclass(frozen=True)
class Operator:
    email: str
    password: str = PASSWORD


def make_user(email: str, *permissions: str) -> Operator:
    create_user(email, PASSWORD, permissions)
    db.session.remove()
    return Operator(email)


def browser(app, address: str = ADDRESS) -> webtest.TestApp:
    return webtest.TestApp(app, extra_environ={"REMOTE_ADDR": address})


def sign_in(web: webtest.TestApp, who: Operator, next_path: str | None = None):
    page = web.get("/login" + (f"?next={next_path}" if next_path else ""))
    form = page.forms["login"]
    form["email"] = who.email
    form["password"] = who.password
    return form.submit()


def finished_run(
    type_: str, keys: list[str], failing: dict[str, str], tenants: dict[str, int] | None = None
) -> str:
    """A run driven through the ledger's own transitions: ``failing`` maps keys to reasons."""
    tenants = tenants or {}
    units = [TaskUnit(key, tenants.get(key)) for key in keys]
    dispatch = ledger.transitions.create_run(type_, {}, "test", units, 1000)
    for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, len(keys) + 1):
        claim = ledger.transitions.claim(unit_id, dispatch.token)
        if claim.unit.key in failing:
            ledger.transitions.fail(claim, failing[claim.unit.key])
        else:
            ledger.transitions.complete(claim)
    ledger.transitions.finalize(dispatch.run_id)
    db.session.remove()
    return dispatch.run_uuid


@pytest.fixture
def web(app) -> webtest.TestApp:
    return browser(app)


@pytest.fixture
def people(app) -> dict[str, Operator]:
    """A manager (view + manage), a viewer (view only) and a stranger (no permission)."""
    # No app context stays pushed: requests must get their own (``g``, the session).
    with app.app_context():
        return {
            "manager": make_user("manager@example.com", *PERMISSIONS),
            "viewer": make_user("viewer@example.com", VIEW),
            "stranger": make_user("stranger@example.com"),
        }


@pytest.fixture
def controlled(make_app) -> ControlledTask:
    task = ControlledTask("tests.backoffice")
    make_app.register(task)
    return task


__all__ = ["Broken", "controlled", "people", "web"]
