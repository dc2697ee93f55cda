from __future__ import annotations

from payments.statements import MonthlyStatementsTask
from taskrunner.contract import register


def init_app(_app) -> None:
    register(MonthlyStatementsTask())
