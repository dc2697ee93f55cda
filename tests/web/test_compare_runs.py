"""Tonight's run against last night's (issue 24, item 5; SPEC §17, "Triage")."""

from __future__ import annotations

import json
import random

import pytest

from tests.web.backoffice_support import VIEW, browser, finished_run, make_user, sign_in

TYPE = "payments.statements"
KEYS = ["a", "b", "c", "d", "f"]


@pytest.fixture
def nights(app) -> dict[str, str]:
    """Three runs of one type: c fails in all three, b in the last two, a only the night
    before (it recovered), d fails tonight for the first time and e is new tonight."""
    with app.app_context():
        oldest = finished_run(TYPE, KEYS, {"c": "no statement for tenant 3"})
        before = finished_run(
            TYPE,
            KEYS,
            {
                "a": "no statement for tenant 1",
                "b": "no statement for tenant 2",
                "c": "no statement for tenant 3",
            },
        )
        tonight = finished_run(
            TYPE,
            [*KEYS, "e"],
            {
                "b": "no statement for tenant 2",
                "c": "no statement for tenant 3",
                "d": "billing address missing for tenant 4",
                "e": "no statement for tenant 5",
            },
        )
        # Another type's run in between is never taken for "the previous run".
        finished_run("other.type", ["a"], {"a": "x"})
    return {"oldest": oldest, "before": before, "tonight": tonight}


@pytest.fixture
def viewer_web(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    return web


def keys_in(page, section: str) -> list[str]:
    return [a.get_text() for a in page.html.select(f"#{section} td.key a")]


def test_the_compare_page_against_the_previous_run_of_the_type(nights, viewer_web):
    page = viewer_web.get(f"/backoffice/task-runs/{nights['tonight']}/compare")

    assert keys_in(page, "newly-failing") == ["d", "e"]
    assert keys_in(page, "recovered") == ["a"]
    assert keys_in(page, "still-failing") == ["b", "c"]
    streaks = [
        td.get_text() for td in page.html.select("#still-failing td[data-label='Runs in a row']")
    ]
    assert streaks == ["2", "3"]
    befores = [
        td.get_text(" ", strip=True)
        for td in page.html.select("#newly-failing td[data-label=Before]")
    ]
    assert befores == ["completed", "not in that run"]
    groups = [a.get_text() for a in page.html.select("section .results a.error-text")]
    assert groups == ["billing address missing for tenant #"]
    assert nights["before"][:8] in page.html.select_one("h1").get_text()
    assert "Duration" in page.text and "Throughput" in page.text


def test_compare_with_another_run_and_what_is_refused(nights, viewer_web):
    base = f"/backoffice/task-runs/{nights['tonight']}/compare"

    page = viewer_web.get(f"{base}?with={nights['oldest']}")

    assert keys_in(page, "newly-failing") == ["b", "d", "e"]
    assert keys_in(page, "recovered") == []
    viewer_web.get(f"{base}?with={nights['tonight']}", status=404)
    viewer_web.get(f"{base}?with=not-a-uuid", status=404)
    viewer_web.get(f"{base}?with=00000000-0000-4000-8000-000000000000", status=404)
    viewer_web.get(f"/backoffice/task-runs/{nights['oldest']}/compare", status=404)


def test_the_run_page_links_to_the_comparison_with_its_counts(nights, viewer_web):
    page = viewer_web.get(f"/backoffice/task-runs/{nights['tonight']}")

    link = page.html.select_one("a.compare-link")
    assert link.get_text() == "vs the previous run: 2 newly failing, 1 recovered"
    assert link["href"] == f"/backoffice/task-runs/{nights['tonight']}/compare"
    first = viewer_web.get(f"/backoffice/task-runs/{nights['oldest']}")
    assert first.html.select_one("a.compare-link") is None


def test_the_compare_json_has_count_and_units_for_each_set(nights, viewer_web):
    body = viewer_web.get(f"/api/v1/backoffice/task-runs/{nights['tonight']}/compare").json

    assert (body["uuid"], body["with"]) == (nights["tonight"], nights["before"])
    assert {k: body[k]["count"] for k in ("newly_failing", "recovered", "still_failing")} == {
        "newly_failing": 2,
        "recovered": 1,
        "still_failing": 2,
    }
    assert [u["unit_key"] for u in body["still_failing"]["units"]] == ["b", "c"]
    assert [u["failing_runs"] for u in body["still_failing"]["units"]] == [2, 3]
    assert body["recovered"]["units"][0]["previous_error"] == "no statement for tenant 1"
    assert [g["reason"] for g in body["new_error_groups"]] == [
        "billing address missing for tenant #"
    ]
    viewer_web.get(f"/api/v1/backoffice/task-runs/{nights['oldest']}/compare", status=404)


def test_the_cli_compares_and_refuses_in_one_line(app, nights, cli):
    text = cli.invoke(args=["tasks", "compare", nights["tonight"]])
    as_json = cli.invoke(args=["tasks", "compare", nights["tonight"], nights["oldest"], "--json"])
    first = cli.invoke(args=["tasks", "compare", nights["oldest"]])
    unknown = cli.invoke(args=["tasks", "compare", "nope"])

    assert text.exit_code == 0
    assert "newly failing: 2" in text.stdout and "recovered: 1" in text.stdout
    assert "  c  tenant=-  3 runs in a row  no statement for tenant 3" in text.stdout
    assert json.loads(as_json.stdout)["newly_failing"]["count"] == 3
    for refused in (first, unknown):
        assert refused.exit_code == 1
        assert len(refused.stderr.strip().splitlines()) == 1
        assert refused.stderr.startswith("error: ")


@pytest.mark.parametrize("seed", range(6))
def test_the_comparison_agrees_with_a_model_of_two_nights_across_many_windows(
    app, monkeypatch, seed
):
    """Two random nights (keys added and dropped, failures under reasons with numbers)
    against a plain model of the three sets and the new groups; the lists are read three
    failed units at a time, so every set crosses windows (and some end inside one)."""
    from taskrunner.ledger import group_windows, ledger
    from taskrunner.ledger.reason_fold import normalize_reason

    monkeypatch.setattr(group_windows, "FIRST_WINDOW", 3)
    rng = random.Random(seed)
    reasons = ["no statement for tenant {}", "vendor timed out after {} s", "iban {} refused"]
    everyone = [f"k{n:02}" for n in range(40)]

    def night(reason_pool: list[str]) -> tuple[list[str], dict[str, str]]:
        keys = [k for k in everyone if rng.random() < 0.85]
        rng.shuffle(keys)
        failing = {
            k: rng.choice(reason_pool).format(rng.randint(1, 999))
            for k in keys
            if rng.random() < 0.5
        }
        return keys, failing

    before_keys, before_failing = night(reasons[:2])
    tonight_keys, tonight_failing = night(reasons)
    with app.app_context():
        before = finished_run(TYPE, before_keys, before_failing)
        tonight = finished_run(TYPE, tonight_keys, tonight_failing)
        run, other = ledger.runs.get_run(tonight), ledger.runs.get_run(before)
        found = ledger.compare.compare(run, other, limit=5)
        counts = ledger.compare.counts(run, other)
        db_groups = [g.reason for g in found.new_groups]

    newly = [k for k in tonight_keys if k in tonight_failing and k not in before_failing]
    still = [k for k in tonight_keys if k in tonight_failing and k in before_failing]
    recovered = [
        k
        for k in before_keys
        if k in before_failing and k in tonight_keys and k not in tonight_failing
    ]
    for changed, model in (
        (found.newly_failing, newly),
        (found.still_failing, still),
        (found.recovered, recovered),
    ):
        assert changed.count == len(model)
        assert [unit["unit_key"] for unit in changed.units] == model[:5]
    assert counts == (len(newly), len(recovered))
    old_reasons = {normalize_reason(r) for r in before_failing.values()}
    assert sorted(db_groups) == sorted(
        {normalize_reason(r) for r in tonight_failing.values()} - old_reasons
    )


def test_the_comparison_counts_every_new_error_group_past_those_it_lists(app, viewer_web):
    keys = [f"u{i}" for i in range(60)]
    with app.app_context():
        finished_run(TYPE, keys, {})
        # Sixty reasons no fold makes one: vendor AA refused, vendor AB refused…
        reasons = {
            k: f"vendor {chr(65 + i // 26)}{chr(65 + i % 26)} refused" for i, k in enumerate(keys)
        }
        tonight = finished_run(TYPE, keys, reasons)

    body = viewer_web.get(f"/api/v1/backoffice/task-runs/{tonight}/compare").json
    page = viewer_web.get(f"/backoffice/task-runs/{tonight}/compare")

    assert len(body["new_error_groups"]) == 50 and body["new_error_groups_count"] == 60
    counts = {
        div.select_one("dt").get_text(): div.select_one("dd").get_text(strip=True)
        for div in page.html.select("dl.compare-counts > div")
    }
    assert counts["New error groups"] == "60"
