"""A task type whose units fail with a domain error full of credentials, for the secret
tests: registered by a fixture in the test process, and by ``init_app`` in consumer
processes (``TASKLEDGER_EXTRA_MODULES=tests.leaky_types``).

A unit of a tenant fails that tenant's pending request with the unit's error first, as
the statements sweep does (``payments.statements.generate_for_tenant``), so the tenant's
failed-request reason is the unit's error too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from asyncrequests.platform import fail_pending, open_request
from taskrunner.contract import TaskOptions, TaskReportableError, TaskUnit, UnitJob, register

LEAKY = "tests.leaky"
REQUEST_KIND = "tests.leaky"
# Each credential shape a vendor's or a driver's message may carry into a domain error.
SECRETS = {
    "api key": "sk_live_LEAKY4eC39HqLyjWDarjtT1zdp7dc",
    "bearer token": "LeakyBearer0123456789abcdef",
    "password in a URL": "hunter2",
    "password pair": "Tr0ub4dor-leaky",
    "token pair": "t0ken-leaky-0123",
    "prefixed name": "Smtp-leaky-S3cret",
    "quoted with a space": "horse-leaky-S3cret",
    "token scheme": "9944b09199c62bcf-leaky",
    "JSON key with a prefix": "wJalrXUtnFEMI-leaky",
    "card number": "4111 1111 1111 1111",
}
MESSAGE = (
    f"vendor refused the export: key {SECRETS['api key']}, "
    f"Authorization: Bearer {SECRETS['bearer token']}, "
    f"dsn postgresql://u:{SECRETS['password in a URL']}@h/db, "
    f"retry with password={SECRETS['password pair']}&token={SECRETS['token pair']} "
    f"for card {SECRETS['card number']}; "
    f"SMTP_PASSWORD={SECRETS['prefixed name']} db_password='correct "
    f"{SECRETS['quoted with a space']}' Authorization: Token {SECRETS['token scheme']}; "
    f'body {{"aws_secret_access_key": "{SECRETS["JSON key with a prefix"]}"}}'
)
# What may be left of the secrets anywhere: the card in any spacing, the rest verbatim.
FOUND = re.compile(
    "|".join(
        [re.escape(v) for k, v in SECRETS.items() if k != "card number"]
        + [r"4111[\s._-]*1111[\s._-]*1111[\s._-]*1111"]
    )
)


class LeakyError(TaskReportableError):
    pass


class LeakyTask:
    """Units ``leak-1..N`` of ``context["tenant_id"]`` (if any), each failing with
    ``MESSAGE``."""

    def type(self) -> str:
        return LEAKY

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, int(context.get("units", 1)) + 1):
            yield TaskUnit(f"leak-{i}", context.get("tenant_id"))

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        def job() -> None:
            error = LeakyError(MESSAGE)
            if unit.tenant_id is not None:
                open_request(unit.tenant_id, REQUEST_KIND, unit.key)
                fail_pending(unit.tenant_id, REQUEST_KIND, unit.key, error)
            raise error

        return job

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=60)


def init_app(app: Any) -> None:
    with app.app_context():
        register(LeakyTask())


EXTRA_MODULES = {"TASKLEDGER_EXTRA_MODULES": "tests.leaky_types"}
