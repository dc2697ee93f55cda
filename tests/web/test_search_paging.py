"""Search: "20 of 119 matches" with paging, and a run opened by the uuid prefix the pages
show (issue 24, item 9)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from extensions import db
from taskrunner.models import TaskRun
from tests.web.backoffice_support import VIEW, browser, finished_run, make_user, sign_in

KEYS = [f"acct-{i:03d}" for i in range(119)]


@pytest.fixture
def viewer_web(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    return web


@pytest.fixture
def many_failures(app) -> str:
    with app.app_context():
        return finished_run(
            "payments.statements", KEYS, {k: f"billing address missing for {k}" for k in KEYS}
        )


def error_keys(page) -> list[str]:
    return [a.get_text() for a in page.html.select("td.key a")]


def test_a_search_says_how_many_matched_and_pages_through_them(many_failures, viewer_web):
    first = viewer_web.get("/backoffice/search?q=billing+address")

    assert "20 of 119 matches" in first.html.select_one("[role=status]").get_text()
    headers = [h.get_text(" ", strip=True) for h in first.html.select("section h2")]
    assert headers == ["Failed units by error 20 of 119"]
    seen, page = error_keys(first), first
    while (nxt := page.html.select_one("nav.pager a[rel=next]")) is not None:
        page = viewer_web.get(nxt["href"])
        seen += error_keys(page)
    assert sorted(seen) == KEYS
    assert "page 6 of the errors" in page.html.select_one("[role=status]").get_text()
    assert page.html.select_one("nav.pager a[rel=prev]") is not None


def test_the_json_search_counts_and_pages_the_same_way(many_failures, viewer_web):
    base = "/api/v1/backoffice/search?q=billing"
    first = viewer_web.get(base).json
    last = viewer_web.get(base + "&in=errors&page=6").json

    assert first["counts"] == {"tenants": 0, "runs": 0, "units": 0, "errors": 119}
    assert len(first["errors"]) == 20 and (first["section"], first["page"]) == (None, 1)
    assert len(last["errors"]) == 19 and last["section"] == "errors"
    units = viewer_web.get("/api/v1/backoffice/search?q=acct-&in=units&page=2").json
    assert units["counts"]["units"] == 119 and len(units["units"]) == 20
    for bad in ("&page=2", "&in=errors&page=0", "&in=nothing", "&in=errors&page=51"):
        viewer_web.get(base + bad, status=400)


def test_an_8_character_uuid_prefix_opens_the_run_when_it_is_unique(app, viewer_web):
    with app.app_context():
        run_uuid = finished_run("diagnostics.probe", ["probe-1"], {})

    opened = viewer_web.get(f"/backoffice/search?q={run_uuid[:8].upper()}")

    assert opened.status_int == 302
    assert opened.headers["Location"].endswith(f"/backoffice/task-runs/{run_uuid}")
    listed = viewer_web.get(f"/backoffice/search?q={run_uuid[:7]}")
    assert listed.status_int == 200 and run_uuid in listed.text


def test_a_shared_8_character_prefix_lists_the_runs(app, viewer_web):
    with app.app_context():
        first = finished_run("diagnostics.probe", ["probe-1"], {})
        second = finished_run("diagnostics.probe", ["probe-1"], {})
        twin = first[:8] + second[8:]
        db.session.execute(update(TaskRun).where(TaskRun.uuid == second).values(uuid=twin))
        db.session.commit()

    page = viewer_web.get(f"/backoffice/search?q={first[:8]}")

    assert page.status_int == 200
    assert "2 matches" in page.html.select_one("[role=status]").get_text()


def test_a_digit_that_is_not_ascii_is_searched_as_text(viewer_web):
    assert viewer_web.get("/api/v1/backoffice/search?q=%C2%B9").json["counts"]["tenants"] == 0


def test_an_error_text_with_capitals_outside_ascii_is_found_in_any_case(app, viewer_web):
    with app.app_context():
        finished_run(
            "payments.statements",
            ["s1", "s2"],
            {"s1": "Échec du prélèvement SEPA", "s2": "ÉCHEC DU PRÉLÈVEMENT SEPA"},
        )

    # As shown, and in any other case: every letter is folded, on either database.
    for typed in (
        "Échec du prélèvement",
        "ÉCHEC DU PRÉLÈVEMENT",
        "échec du prélèvement sepa",
    ):
        found = viewer_web.get("/api/v1/backoffice/search", {"q": typed}).json
        assert sorted(unit["unit_key"] for unit in found["errors"]) == ["s1", "s2"], typed
        assert found["counts"]["errors"] == 2
