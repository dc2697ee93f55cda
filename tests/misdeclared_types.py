"""A deployment's module whose task type breaks the rule of SPEC §10: its units would be
recovered as stuck while they still run (``TASKLEDGER_EXTRA_MODULES``)."""

from __future__ import annotations

from typing import Any

from taskrunner.contract import TaskOptions, register
from tests.factories import ControlledTask


class LongerThanStuck(ControlledTask):
    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=5, timeout=600)


def init_app(app: Any) -> None:
    with app.app_context():
        register(LongerThanStuck("deploy.nightly_export"))
