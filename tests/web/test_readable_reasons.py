"""Reasons stay readable where nothing in them is a secret (issue 24, item 11).

The masker leaves a long digit run alone unless it is a Luhn-valid card number, an IBAN
with a valid checksum or an SSN in its shape: a 28-digit cost-centre code is shown whole
on the unit page, in the error groups and in the JSON API, never as "[card ····0000]1".
The error-group normaliser folds the numbers that vary but keeps a period (2026-11):
the same refusal for two months is two groups, each naming its month.
"""

from __future__ import annotations

import pytest

from taskrunner.contract import operations
from tests.web.backoffice_support import VIEW, browser, finished_run, make_user, sign_in

COST_CENTRE = "0000000000000000000000000001"
GROUPED_CODE = "1234 5678 9012 3456 7890 1234 5678"


@pytest.fixture
def viewer_web(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    return web


def test_a_28_digit_cost_centre_code_is_shown_whole(app, viewer_web):
    reason = f"cost centre {COST_CENTRE} over budget; code {GROUPED_CODE} closed"
    with app.app_context():
        run_uuid = finished_run(
            "tests.budget",
            ["b1", "b2", "b3"],
            {
                "b1": reason,
                "b2": "card 4111 1111 1111 1111 declined",
                "b3": "ssn 078-05-1120 on file for 10 4111111111111111",
            },
        )

    unit_page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/units/b1").text
    groups = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/errors").json["groups"]
    units = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units").json["units"]

    assert reason in unit_page and "[card" not in unit_page
    stored = {u["unit_key"]: u["last_error"] for u in units}
    assert stored == {
        "b1": reason,
        "b2": "card [card ····1111] declined",
        "b3": "ssn [ssn] on file for 10 [card ····1111]",
    }
    assert reason in {group["example"] for group in groups}


def test_error_groups_keep_the_period_and_fold_the_numbers_around_it(app, viewer_web):
    with app.app_context():
        run_uuid = finished_run(
            "payments.monthly_statements",
            ["t4", "t5", "t6", "t7"],
            {
                "t4": "no billing address for 2026-10: tenant 4 closed",
                "t5": "no billing address for 2026-10: tenant 5 closed",
                "t6": "no billing address for 2026-11: tenant 6 closed",
                "t7": "invoice 2026-11-29 of tenant 7 refused",
            },
            tenants={"t4": 4, "t5": 5, "t6": 6, "t7": 7},
        )

    groups = viewer_web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/errors").json["groups"]
    page = viewer_web.get(f"/backoffice/task-runs/{run_uuid}/errors").text

    assert [(g["reason"], g["count"]) for g in groups] == [
        ("no billing address for 2026-10: tenant # closed", 2),
        ("invoice 2026-11-# of tenant # refused", 1),
        ("no billing address for 2026-11: tenant # closed", 1),
    ]
    assert "no billing address for 2026-10: tenant # closed" in page
    # Retrying one group folds the stored reasons the same way, in SQL on PostgreSQL.
    with app.app_context():
        run = operations.find_run(run_uuid)
        counts = [operations.count_retryable(run, True, reason=group["reason"]) for group in groups]
    assert counts == [2, 1, 1]
