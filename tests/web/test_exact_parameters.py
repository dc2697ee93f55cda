"""A parameter that names a stored value is taken as sent: a unit key, a cursor and an
error group's reason may begin or end with spaces (a key is any text the run was given;
a failing task's message may end in a newline), so none is trimmed.

Trimmed, the app's own cursors skipped units and ended a listing early, its links showed
another unit's history, and an error group's link listed none of its units.
"""

from __future__ import annotations

import csv
import io
from urllib.parse import quote, urlencode

import pytest

from tests.web.backoffice_support import browser, finished_run, make_user, sign_in

# Sorted as the units pages list them: " " < " lead " < "after…" < "lead".
KEYS = [" ", " lead ", "after-1", "after-2", "lead"]
SPACED_REASON = "the vendor said no \n"


@pytest.fixture
def world(app) -> dict[str, str]:
    """Two finished runs of the same keys; in the first, two units failed with a reason
    that ends in a space and a newline."""
    with app.app_context():
        viewer = make_user("viewer@example.com", "task-runner.runs.view")
        first = finished_run(
            "diagnostics.probe", KEYS, {" lead ": SPACED_REASON, "after-2": SPACED_REASON}
        )
        second = finished_run("diagnostics.probe", KEYS, {})
    return {"viewer": viewer, "first": first, "second": second}


@pytest.fixture
def web(app, world):
    client = browser(app)
    sign_in(client, world["viewer"])
    return client


def pages(web, url: str, items: str = "units") -> list[dict]:
    """Every item of a cursor-paged JSON listing, one per page, following its own cursors
    (bounded: a cursor read as another would go round for ever)."""
    seen, cursor = [], None
    for _ in range(2 * len(KEYS) + 2):
        query = {"limit": 1} | ({"cursor": cursor} if cursor is not None else {})
        body = web.get(f"{url}&{urlencode(query)}" if "?" in url else f"{url}?{urlencode(query)}")
        seen += body.json[items]
        cursor = body.json["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError(f"{url} never ended: {[item['unit_key'] for item in seen]}")


def test_a_runs_units_paged_by_its_own_cursor_are_each_listed_once(web, world):
    url = f"/api/v1/backoffice/task-runs/{world['first']}/units"
    assert [unit["unit_key"] for unit in pages(web, url)] == KEYS


def test_a_unit_asked_for_by_its_key_is_that_unit(web, world):
    for key in KEYS:
        body = web.get(f"/api/v1/backoffice/task-runs/{world['first']}/unit?key={quote(key)}").json
        assert body["unit_key"] == key


def test_a_keys_history_is_that_keys_paged_by_its_own_cursor(web, world):
    for key in (" lead ", " "):
        units = pages(web, f"/api/v1/backoffice/units?key={quote(key)}")
        assert [(unit["unit_key"], unit["run_uuid"]) for unit in units] == [
            (key, world["second"]),
            (key, world["first"]),
        ]
        # The page's own "Older" link, as the page wrote it.
        page = web.get(f"/backoffice/units?key={quote(key)}&limit=1")
        [older] = [a["href"] for a in page.html.select("a[href]") if "cursor=" in a["href"]]
        assert world["first"][:8] in web.get(older).text


def test_an_error_groups_units_are_listed_when_its_reason_ends_in_spaces(web, world):
    run = world["first"]
    [group] = web.get(f"/api/v1/backoffice/task-runs/{run}/errors").json["groups"]
    assert group["count"] == 2
    by_reason = urlencode({"reason": group["reason"]})
    units = web.get(f"/api/v1/backoffice/task-runs/{run}/units?{by_reason}").json["units"]
    assert [unit["unit_key"] for unit in units] == [" lead ", "after-2"]
    exported = web.get(f"/backoffice/task-runs/{run}/units.csv?{by_reason}").text
    assert [row[2] for row in csv.reader(io.StringIO(exported))][1:] == [" lead ", "after-2"]

    # The errors page's link to the group's units, followed as it is written.
    errors = web.get(f"/backoffice/task-runs/{run}/errors")
    [link] = [a["href"] for a in errors.html.select("a[href]") if "reason=" in a["href"]]
    listed = web.get(link)
    assert "No units in this error group" not in listed.text
    assert "after-2" in listed.text
